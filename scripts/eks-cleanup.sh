#!/usr/bin/env bash
# Deletes what the other eks-*.sh scripts made, in the order that lets each deletion succeed:
# the jobs and TensorBoard, then the volume's Kubernetes objects and namespace, then EFS (access point, mount
# targets, file system, security group: the group goes only once the mount targets' network
# interfaces are gone), then the cluster (eksctl). Costs stop when this finishes.
#
#   scripts/eks-cleanup.sh [--jobs-only] [--keep-cluster] [--delete-images] [--yes]
#
#   --jobs-only      only the MPIJob, Jobs and TensorBoard (keep volume, data and cluster)
#   --keep-cluster   everything but the cluster
#   --delete-images  also the ECR repository cifar10-dp and its images
#   --yes            do not ask for confirmation
# Exit codes: 0 done, 1 failure, 2 bad usage.
# shellcheck source=eks-lib.sh
. "$(dirname "$0")/eks-lib.sh"
jobs_only=0 keep_cluster=0 delete_images=0 yes=0
while (($#)); do
  case $1 in
    --jobs-only) jobs_only=1; shift ;;
    --keep-cluster) keep_cluster=1; shift ;;
    --delete-images) delete_images=1; shift ;;
    --yes) yes=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) bad_usage "unknown argument $1" ;;
  esac
done
need kubectl
((jobs_only)) || need aws eksctl
if ((!yes)); then
  what="the cifar10-dp jobs"
  ((jobs_only)) || what="$what, the EFS volume and ALL data and models on it"
  ((jobs_only || keep_cluster)) || what="$what, and the cluster $CLUSTER"
  read -r -p "Delete $what? [y/N] " answer
  [[ $answer == [yY]* ]] || die "nothing deleted"
fi
k() { kubectl -n "$NAMESPACE" "$@"; }
aws_() { aws --region "$REGION" "$@"; }

say "jobs"
k delete mpijob cifar10-train --ignore-not-found --wait=true
k delete job cifar10-test cifar10-data --ignore-not-found --wait=true
k delete deployment,service tensorboard --ignore-not-found --wait=true # it holds the volume
((jobs_only)) && exit 0

say "volume objects and namespace"
kubectl delete -k "$K8S/storage" --ignore-not-found --wait=true

fs=$(setting EFS_ID) ap=$(setting EFS_ACCESS_POINT)
if [[ $fs != fs-00000000000000000 ]]; then
  say "EFS file system $fs"
  [[ $ap == fsap-00000000000000000 ]] || aws_ efs delete-access-point --access-point-id "$ap"
  for mt in $(aws_ efs describe-mount-targets --file-system-id "$fs" --query 'MountTargets[].MountTargetId' --output text); do
    aws_ efs delete-mount-target --mount-target-id "$mt"
  done
  for _ in $(seq 60); do
    left=$(aws_ efs describe-mount-targets --file-system-id "$fs" --query 'length(MountTargets)' --output text)
    ((left == 0)) && break
    sleep "$POLL_SECONDS"
  done
  ((left == 0)) || die "$fs still has $left mount targets"
  aws_ efs delete-file-system --file-system-id "$fs"
  set_setting EFS_ID fs-00000000000000000
  set_setting EFS_ACCESS_POINT fsap-00000000000000000
fi
vpc=$(aws_ eks describe-cluster --name "$CLUSTER" --query cluster.resourcesVpcConfig.vpcId --output text 2>/dev/null) || vpc=""
if [[ $vpc == vpc-* ]]; then
  sg=$(aws_ ec2 describe-security-groups --filters "Name=vpc-id,Values=$vpc" "Name=group-name,Values=$CLUSTER-efs" \
    --query 'SecurityGroups[0].GroupId' --output text)
  if [[ $sg == sg-* ]]; then
    say "security group $sg"
    # The mount targets' network interfaces linger for a while after the targets are deleted.
    deleted=0
    for _ in $(seq 30); do
      if aws_ ec2 delete-security-group --group-id "$sg" 2>/dev/null; then deleted=1; break; fi
      sleep "$POLL_SECONDS"
    done
    ((deleted)) || die "cannot delete security group $sg (still in use?)"
  fi
fi
if ((delete_images)); then
  say "ECR repository cifar10-dp"
  aws_ ecr delete-repository --repository-name cifar10-dp --force >/dev/null
fi
((keep_cluster)) && exit 0
say "cluster $CLUSTER (10-15 minutes)"
eksctl delete cluster -f "$CLUSTER_CONFIG" --wait
