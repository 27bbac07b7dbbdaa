#!/usr/bin/env bash
# Creates the shared EFS file system for the cluster's VPC, as the workshop's create-efs step:
# a security group that lets the VPC reach NFS (TCP 2049), the file system (encrypted, elastic
# throughput), one mount target per availability zone of the cluster's private subnets, and an
# access point owned by uid/gid 1000 (the image's user). Writes EFS_ID and EFS_ACCESS_POINT
# into k8s/settings/settings.env. Does nothing when settings.env already names a live file system.
#
#   scripts/eks-create-efs.sh
#
# Exit codes: 0 done, 1 failure, 2 bad usage.
# shellcheck source=eks-lib.sh
. "$(dirname "$0")/eks-lib.sh"
while (($#)); do
  case $1 in
    -h | --help) usage; exit 0 ;;
    *) bad_usage "unknown argument $1" ;;
  esac
done
need aws
SG_NAME=$CLUSTER-efs
aws_() { aws --region "$REGION" "$@"; }

fs=$(setting EFS_ID)
if [[ $fs != fs-00000000000000000 ]] &&
  state=$(aws_ efs describe-file-systems --file-system-id "$fs" --query 'FileSystems[0].LifeCycleState' --output text 2>/dev/null) &&
  [[ $state == available ]]; then
  say "$fs already exists (settings.env); nothing to do"
  exit 0
fi

vpc=$(aws_ eks describe-cluster --name "$CLUSTER" --query cluster.resourcesVpcConfig.vpcId --output text)
[[ $vpc == vpc-* ]] || die "cluster $CLUSTER: no VPC id (got '$vpc'); create the cluster first"
cidr=$(aws_ ec2 describe-vpcs --vpc-ids "$vpc" --query 'Vpcs[0].CidrBlock' --output text)
say "cluster VPC $vpc ($cidr)"

sg=$(aws_ ec2 create-security-group --group-name "$SG_NAME" --vpc-id "$vpc" \
  --description "NFS from the $CLUSTER VPC to its EFS file system" --query GroupId --output text)
aws_ ec2 authorize-security-group-ingress --group-id "$sg" --protocol tcp --port 2049 --cidr "$cidr" >/dev/null
say "security group $sg: TCP 2049 from $cidr"

fs=$(aws_ efs create-file-system --creation-token "$CLUSTER-cifar10" --encrypted \
  --performance-mode generalPurpose --throughput-mode elastic \
  --tags "Key=Name,Value=$CLUSTER-cifar10" --query FileSystemId --output text)
[[ $fs == fs-* ]] || die "aws efs create-file-system gave '$fs', not a file system id"
for _ in $(seq 60); do
  state=$(aws_ efs describe-file-systems --file-system-id "$fs" --query 'FileSystems[0].LifeCycleState' --output text)
  [[ $state == available ]] && break
  sleep "${POLL_SECONDS}"
done
[[ $state == available ]] || die "$fs is still '$state'"
say "file system $fs"

# One mount target per availability zone (a second one in the same zone is an error): the
# private subnets eksctl made for the nodes.
declare -A zone_done=()
while read -r subnet zone; do
  [[ -n $subnet && -z ${zone_done[$zone]:-} ]] || continue
  aws_ efs create-mount-target --file-system-id "$fs" --subnet-id "$subnet" --security-groups "$sg" >/dev/null
  zone_done[$zone]=1
  say "mount target in $zone ($subnet)"
done < <(aws_ ec2 describe-subnets \
  --filters "Name=vpc-id,Values=$vpc" "Name=tag:kubernetes.io/role/internal-elb,Values=1" \
  --query 'Subnets[].[SubnetId,AvailabilityZone]' --output text)
((${#zone_done[@]} > 0)) || die "no private subnets found in $vpc"

ap=$(aws_ efs create-access-point --file-system-id "$fs" --posix-user Uid=1000,Gid=1000 \
  --root-directory 'Path=/cifar10-dp,CreationInfo={OwnerUid=1000,OwnerGid=1000,Permissions=0755}' \
  --tags "Key=Name,Value=$CLUSTER-cifar10" --query AccessPointId --output text)
[[ $ap == fsap-* ]] || die "aws efs create-access-point gave '$ap', not an access point id"
say "access point $ap (uid/gid 1000, /cifar10-dp)"

set_setting EFS_ID "$fs"
set_setting EFS_ACCESS_POINT "$ap"
say "next: scripts/eks-build-push.sh"
