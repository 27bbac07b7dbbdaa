#!/usr/bin/env bash
# scripts/eks-*.sh against stand-in aws, eksctl, kubectl and docker (tests/fake-cli) that record
# their arguments: the calls each script makes, their order and flags, and the ids handed from
# one step to the next (VPC -> security group -> file system -> mount targets -> access point
# -> settings.env -> the rendered PersistentVolume; account -> ECR image -> rendered pods).
# Runs in a copy of scripts/ and k8s/, so the repository's settings.env is never touched.
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/.." && pwd)
REAL_KUBECTL=$(kubectl_for_kustomize)
export REAL_KUBECTL

R=$T/repo
mkdir -p "$R" "$T/fake"
cp -r "$SRC/scripts" "$SRC/k8s" "$SRC/Dockerfile" "$R/"
for c in aws eksctl kubectl docker; do ln -s "$SRC/tests/fake-cli" "$T/fake/$c"; done
export FAKE_LOG=$T/calls FAKE_RULES=$T/rules FAKE_DIR=$T/fakedir POLL_SECONDS=0
export PATH=$T/fake:/usr/bin:/bin
SETTINGS=$R/k8s/settings/settings.env

# rules LINE...: the stand-ins' answers for the next script (tab-separated: glob, exit, output).
rules() { printf '%s\n' "$@" >"$FAKE_RULES"; }
fresh() { : >"$FAKE_LOG"; rm -rf "$FAKE_DIR"; mkdir -p "$FAKE_DIR"; }
# script NAME ARGS...: runs scripts/NAME in the copy (stdin: /dev/null unless redirected).
script() {
  local s=$1
  shift
  run "$R/scripts/$s" "$@"
}
# ok DESCRIPTION COMMAND...: check, with the recorded calls in the failure message.
ok() {
  local what=$1
  shift
  if "$@"; then pass; else fail "$what; calls: $(cat "$FAKE_LOG"); stderr: $(head -c 400 "$T/err")"; fi
}
called() { ok "$1: no call '$2'" grep -qxF -- "$2" "$FAKE_LOG"; }
absent() { ! grep -qF -- "$1" "$FAKE_LOG"; }
not_called() { ok "$1: unexpected call matching '$2'" absent "$2"; }
err_has() { ok "$1: stderr lacks '$2'" grep -qF -- "$2" "$T/err"; }
# in_order DESCRIPTION CALL...: each exact call is recorded, and after the previous one.
in_order() {
  local what=$1 prev=0 n c
  shift
  for c in "$@"; do
    n=$(grep -nxF -- "$c" "$FAKE_LOG" | head -n 1 | cut -d: -f1)
    if [[ -z $n || $n -le $prev ]]; then
      fail "$what: '$c' missing or out of order in: $(cat "$FAKE_LOG")"
      return
    fi
    prev=$n
  done
  pass
}
setting_is() { ok "$1: settings.env has $(grep "^$2=" "$SETTINGS"), want $3" grep -qx "$2=$3" "$SETTINGS"; }
TAB=$'\t'

# Every script: --help, and a bad argument is exit 2.
for s in eks-create-cluster eks-install-operators eks-create-efs eks-build-push eks-deploy eks-status eks-tensorboard eks-cleanup; do
  fresh
  script "$s.sh" --help
  expect_rc 0 "$s --help"
  expect_out "$s --help shows usage" "scripts/$s.sh"
  script "$s.sh" --bogus
  expect_rc 2 "$s --bogus"
  check "$s --bogus calls nothing" test ! -s "$FAKE_LOG"
done

# 1. Cluster.
fresh
rules "x${TAB}0${TAB}"
script eks-create-cluster.sh --gpu-nodes 2
expect_rc 0 "create-cluster"
in_order "create-cluster calls" \
  "eksctl create cluster -f $R/k8s/eks/cluster.yaml" \
  "eksctl scale nodegroup --cluster cifar10-dp --region us-west-2 --name gpu --nodes 2" \
  "aws eks update-kubeconfig --name cifar10-dp --region us-west-2" \
  "kubectl get nodes -L cifar10-dp/pool,node.kubernetes.io/instance-type"
fresh
script eks-create-cluster.sh
not_called "no GPU nodes by default" "scale nodegroup"
script eks-create-cluster.sh --gpu-nodes two
expect_rc 2 "--gpu-nodes two"
fresh
rules "eksctl create cluster*${TAB}1${TAB}Error: quota exceeded"
script eks-create-cluster.sh
expect_rc 1 "eksctl failure stops the script"
not_called "nothing after the failure" "update-kubeconfig"

# 2. Operators.
fresh
rules "aws sts get-caller-identity*${TAB}0${TAB}123456789012"
script eks-install-operators.sh --gpu
expect_rc 0 "install-operators --gpu"
in_order "install-operators calls" \
  "kubectl apply --server-side -f https://raw.githubusercontent.com/kubeflow/mpi-operator/v0.6.0/deploy/v2beta1/mpi-operator.yaml" \
  "kubectl wait --for=condition=established --timeout=120s crd/mpijobs.kubeflow.org" \
  "kubectl -n mpi-operator rollout status deployment/mpi-operator --timeout=300s" \
  "aws sts get-caller-identity --query Account --output text" \
  "eksctl create iamserviceaccount --cluster cifar10-dp --region us-west-2 --namespace kube-system --name efs-csi-controller-sa --role-name cifar10-dp-efs-csi-driver --role-only --attach-policy-arn arn:aws:iam::aws:policy/service-role/AmazonEFSCSIDriverPolicy --approve" \
  "eksctl create addon --cluster cifar10-dp --region us-west-2 --name aws-efs-csi-driver --service-account-role-arn arn:aws:iam::123456789012:role/cifar10-dp-efs-csi-driver --force" \
  "kubectl -n kube-system rollout status deployment/efs-csi-controller --timeout=300s" \
  "kubectl -n kube-system get deployment metrics-server --ignore-not-found -o name" \
  "kubectl apply -f https://github.com/kubernetes-sigs/metrics-server/releases/download/v0.7.2/components.yaml" \
  "kubectl -n kube-system rollout status deployment/metrics-server --timeout=300s" \
  "kubectl get daemonsets --all-namespaces -o custom-columns=NS:.metadata.namespace,NAME:.metadata.name --no-headers" \
  "kubectl apply -f https://raw.githubusercontent.com/NVIDIA/k8s-device-plugin/v0.17.2/deployments/static/nvidia-device-plugin.yml"
fresh
rules "aws sts get-caller-identity*${TAB}0${TAB}123456789012" \
  "kubectl get daemonsets --all-namespaces *${TAB}0${TAB}kube-system   aws-node\nkube-system   nvidia-device-plugin-daemonset"
script eks-install-operators.sh --gpu
expect_rc 0 "install-operators --gpu with eksctl's device plugin present"
not_called "device plugin present: not applied again (no downgrade)" "k8s-device-plugin"
expect_out "device plugin present: says so" "NVIDIA device plugin: already installed \(kube-system/nvidia-device-plugin-daemonset\)"
fresh
rules "aws sts get-caller-identity*${TAB}0${TAB}123456789012" \
  "kubectl -n kube-system get deployment metrics-server *${TAB}0${TAB}deployment.apps/metrics-server"
script eks-install-operators.sh
expect_rc 0 "install-operators with metrics-server present"
not_called "metrics-server already there: not installed again" "metrics-server/releases"
called "metrics-server already there: still waited for" "kubectl -n kube-system rollout status deployment/metrics-server --timeout=300s"
fresh
rules "aws sts get-caller-identity*${TAB}0${TAB}None"
script eks-install-operators.sh
expect_rc 1 "no account id"
expect_err "no account id" "not an account id"
not_called "no add-on without an account" "create addon"
not_called "no device plugin without --gpu" "nvidia"

# 3. EFS: ids flow from each call into the next and into settings.env.
fresh
rules "aws --region us-west-2 eks describe-cluster --name cifar10-dp *${TAB}0${TAB}vpc-0abc" \
  "aws --region us-west-2 ec2 describe-vpcs --vpc-ids vpc-0abc *${TAB}0${TAB}192.168.0.0/16" \
  "aws --region us-west-2 ec2 create-security-group --group-name cifar10-dp-efs --vpc-id vpc-0abc *${TAB}0${TAB}sg-0123" \
  "aws --region us-west-2 efs create-file-system *${TAB}0${TAB}fs-0feed" \
  "aws --region us-west-2 efs describe-file-systems --file-system-id fs-0feed *${TAB}0${TAB}creating||available" \
  "aws --region us-west-2 ec2 describe-subnets *${TAB}0${TAB}subnet-a\tus-west-2a\nsubnet-b\tus-west-2b\nsubnet-c\tus-west-2a" \
  "aws --region us-west-2 efs create-access-point --file-system-id fs-0feed *${TAB}0${TAB}fsap-0ace"
script eks-create-efs.sh
expect_rc 0 "create-efs"
in_order "create-efs calls" \
  "aws --region us-west-2 eks describe-cluster --name cifar10-dp --query cluster.resourcesVpcConfig.vpcId --output text" \
  "aws --region us-west-2 ec2 describe-vpcs --vpc-ids vpc-0abc --query Vpcs[0].CidrBlock --output text" \
  "aws --region us-west-2 ec2 create-security-group --group-name cifar10-dp-efs --vpc-id vpc-0abc --description NFS from the cifar10-dp VPC to its EFS file system --query GroupId --output text" \
  "aws --region us-west-2 ec2 authorize-security-group-ingress --group-id sg-0123 --protocol tcp --port 2049 --cidr 192.168.0.0/16" \
  "aws --region us-west-2 efs create-file-system --creation-token cifar10-dp-cifar10 --encrypted --performance-mode generalPurpose --throughput-mode elastic --tags Key=Name,Value=cifar10-dp-cifar10 --query FileSystemId --output text" \
  "aws --region us-west-2 efs create-mount-target --file-system-id fs-0feed --subnet-id subnet-a --security-groups sg-0123" \
  "aws --region us-west-2 efs create-mount-target --file-system-id fs-0feed --subnet-id subnet-b --security-groups sg-0123" \
  "aws --region us-west-2 efs create-access-point --file-system-id fs-0feed --posix-user Uid=1000,Gid=1000 --root-directory Path=/cifar10-dp,CreationInfo={OwnerUid=1000,OwnerGid=1000,Permissions=0755} --tags Key=Name,Value=cifar10-dp-cifar10 --query AccessPointId --output text"
check "waited until available (2 polls)" test "$(grep -c 'describe-file-systems' "$FAKE_LOG")" = 2
not_called "one mount target per zone" "--subnet-id subnet-c"
setting_is "file system id saved" EFS_ID fs-0feed
setting_is "access point id saved" EFS_ACCESS_POINT fsap-0ace
fresh
rules "aws --region us-west-2 efs describe-file-systems --file-system-id fs-0feed *${TAB}0${TAB}available"
script eks-create-efs.sh
expect_rc 0 "create-efs again"
expect_out "create-efs again is a no-op" "fs-0feed already exists"
not_called "create-efs again creates nothing" "create-"

# 4. Image: account -> registry -> pushed name -> settings.env.
fresh
rules "aws sts get-caller-identity*${TAB}0${TAB}123456789012" \
  "aws ecr describe-repositories*${TAB}254${TAB}" \
  "aws ecr get-login-password*${TAB}0${TAB}s3cret"
script eks-build-push.sh --flavour gpu --tag t1
expect_rc 0 "build-push"
REG=123456789012.dkr.ecr.us-west-2.amazonaws.com
in_order "build-push calls" \
  "aws ecr describe-repositories --region us-west-2 --repository-names cifar10-dp" \
  "aws ecr create-repository --region us-west-2 --repository-name cifar10-dp --image-scanning-configuration scanOnPush=true" \
  "docker login --username AWS --password-stdin $REG" \
  "docker build --build-arg FLAVOUR=gpu -t $REG/cifar10-dp:t1 $R" \
  "docker push $REG/cifar10-dp:t1"
called "login password from ECR" "aws ecr get-login-password --region us-west-2"
check "password through stdin, not argv" grep -qx s3cret "$FAKE_DIR/docker-password"
not_called "password never on a command line" "s3cret"
setting_is "image saved" IMAGE "$REG/cifar10-dp:t1"
script eks-build-push.sh --flavour arm
expect_rc 2 "--flavour arm"

# 5. Deploy, in order, with this run's id everywhere.
deploy_rules() { # deploy_rules MPIJOB-CONDITIONS TEST-CONDITIONS
  rules "kubectl -n cifar10 get mpijob cifar10-train --ignore-not-found -o name${TAB}0${TAB}" \
    "kubectl -n cifar10 get job cifar10-data *${TAB}0${TAB}||Complete" \
    "kubectl -n cifar10 get mpijob cifar10-train *${TAB}0${TAB}$1" \
    "kubectl -n cifar10 get job cifar10-test *${TAB}0${TAB}$2" \
    "kubectl -n cifar10 logs job/cifar10-train-launcher --tail=100${TAB}0${TAB}epoch 1/10: loss 1.2||epoch 2/10: loss 0.9" \
    "kubectl -n cifar10 logs job/cifar10-test${TAB}0${TAB}Accuracy of the network on the 10000 test images: 85 %"
}
fresh
deploy_rules "Created||Created Running||Created Running||Created Succeeded" "||Complete"
script eks-deploy.sh --run-id r42
expect_rc 0 "deploy"
in_order "deploy steps in order" \
  "kubectl apply -k $R/k8s/storage" \
  "kubectl -n cifar10 wait --for=jsonpath={.status.phase}=Bound pvc/cifar10-efs --timeout=300s" \
  "kubectl -n cifar10 delete job cifar10-data --ignore-not-found --wait=true" \
  "kubectl apply -k $R/k8s/data" \
  "kubectl -n cifar10 get job cifar10-data --ignore-not-found -o jsonpath={.status.conditions[?(@.status==\"True\")].type}" \
  "kubectl -n cifar10 delete mpijob cifar10-train --ignore-not-found --wait=true" \
  "kubectl apply -k $R/k8s/train-cpu" \
  "kubectl -n cifar10 get mpijob cifar10-train --ignore-not-found -o jsonpath={.status.conditions[?(@.status==\"True\")].type}" \
  "kubectl apply -k $R/k8s/test" \
  "kubectl -n cifar10 logs job/cifar10-test"
expect_out "training progress shown" "epoch 2/10: loss 0.9"
expect_out "test log shown" "Accuracy of the network on the 10000 test images: 85 %"
setting_is "run id saved" RUN_ID r42
if [[ -n $REAL_KUBECTL ]]; then
  check "applied PV names the file system and access point" grep -q "volumeHandle: fs-0feed::fsap-0ace" "$FAKE_DIR"/render.*.storage.yaml
  for part in data train-cpu test; do
    check "$part: pods use the pushed image" \
      bash -c "grep 'image:' $FAKE_DIR/render.*.$part.yaml | grep -v -q '$REG/cifar10-dp:t1' && exit 1; grep -q 'image: $REG/cifar10-dp:t1' $FAKE_DIR/render.*.$part.yaml"
    check "$part: settings carry run r42" grep -q "RUN_ID: r42" "$FAKE_DIR"/render.*."$part".yaml
  done
else
  echo "test_eks_scripts: skipped the rendered-manifest checks: no kubectl >= 1.21 with kustomize"
fi
fresh
deploy_rules "Created Succeeded" "Complete"
script eks-deploy.sh --gpu --run-id r43
expect_rc 0 "deploy --gpu"
called "GPU variant applied" "kubectl apply -k $R/k8s/train-gpu"
not_called "not the CPU variant" "k8s/train-cpu"

fresh
rules "kubectl -n cifar10 get mpijob cifar10-train --ignore-not-found -o name${TAB}0${TAB}mpijob.kubeflow.org/cifar10-train" \
  "kubectl -n cifar10 get mpijob cifar10-train *${TAB}0${TAB}Created Running"
script eks-deploy.sh --run-id r44
expect_rc 1 "deploy while a run is in progress"
err_has "refusal names the reason" "still running"
not_called "nothing applied while a run is in progress" "apply"
setting_is "run id unchanged by the refusal" RUN_ID r43

fresh
deploy_rules "Created Running||Created Failed" ""
script eks-deploy.sh --run-id r45
expect_rc 1 "training failed"
err_has "training failure message" "mpijob/cifar10-train failed"
not_called "no test Job after failed training" "k8s/test"

fresh
deploy_rules "Created Succeeded" "Failed"
script eks-deploy.sh --run-id r46
expect_rc 1 "model below the gate"
err_has "gate failure message" "job/cifar10-test failed"

fresh
deploy_rules "Created Succeeded" "Complete"
script eks-deploy.sh --no-wait --run-id r47
expect_rc 0 "deploy --no-wait"
in_order "--no-wait still applies in order" "kubectl apply -k $R/k8s/storage" "kubectl apply -k $R/k8s/data" \
  "kubectl apply -k $R/k8s/train-cpu" "kubectl apply -k $R/k8s/test"
not_called "--no-wait polls nothing" "jsonpath={.status.conditions"

# 6. Status.
fresh
script eks-status.sh --follow
expect_rc 0 "status --follow"
in_order "status calls" "kubectl -n cifar10 get mpijobs,jobs,pods,pvc -o wide" "kubectl top nodes" \
  "kubectl -n cifar10 top pods --containers" "kubectl -n cifar10 logs -f job/cifar10-train-launcher"
fresh
rules "kubectl top nodes${TAB}1${TAB}error: Metrics API not available"
script eks-status.sh
expect_rc 0 "status without metrics-server figures"
expect_out "status explains the missing figures" "no figures yet: metrics-server"

# 6b. TensorBoard.
fresh
script eks-tensorboard.sh --port 7007
expect_rc 0 "tensorboard"
in_order "tensorboard calls" "kubectl apply -k $R/k8s/tensorboard" \
  "kubectl -n cifar10 rollout status deployment/tensorboard --timeout=600s" \
  "kubectl -n cifar10 port-forward service/tensorboard 7007:6006"
if [[ -n $REAL_KUBECTL ]]; then
  tb_render=("$FAKE_DIR"/render.*.tensorboard.yaml)
  check "tensorboard applies a Deployment running TENSORBOARD_IMAGE" \
    grep -q "image: $(sed -n 's/^TENSORBOARD_IMAGE=//p' "$SETTINGS")\$" "${tb_render[0]}"
fi
fresh
script eks-tensorboard.sh --no-forward
not_called "--no-forward forwards nothing" "port-forward"
fresh
script eks-tensorboard.sh --delete
called "tensorboard --delete" "kubectl -n cifar10 delete deployment,service tensorboard --ignore-not-found --wait=true"
not_called "--delete applies nothing" "apply"
script eks-tensorboard.sh --port 0
expect_rc 2 "--port 0"

# 7. Clean-up: confirmation, then jobs -> volume -> EFS -> security group -> cluster.
fresh
script eks-cleanup.sh <<<"n"
expect_rc 1 "clean-up declined"
not_called "declined: nothing deleted" "delete"
fresh
rules "aws --region us-west-2 efs describe-mount-targets --file-system-id fs-0feed --query MountTargets[].MountTargetId *${TAB}0${TAB}fsmt-1\tfsmt-2" \
  "aws --region us-west-2 efs describe-mount-targets --file-system-id fs-0feed --query length(MountTargets) *${TAB}0${TAB}2||0" \
  "aws --region us-west-2 eks describe-cluster *${TAB}0${TAB}vpc-0abc" \
  "aws --region us-west-2 ec2 describe-security-groups *${TAB}0${TAB}sg-0123" \
  "aws --region us-west-2 ec2 delete-security-group *${TAB}0${TAB}exit=1;||exit=0;"
script eks-cleanup.sh --yes --delete-images
expect_rc 0 "clean-up"
in_order "clean-up order" \
  "kubectl -n cifar10 delete mpijob cifar10-train --ignore-not-found --wait=true" \
  "kubectl -n cifar10 delete job cifar10-test cifar10-data --ignore-not-found --wait=true" \
  "kubectl -n cifar10 delete deployment,service tensorboard --ignore-not-found --wait=true" \
  "kubectl delete -k $R/k8s/storage --ignore-not-found --wait=true" \
  "aws --region us-west-2 efs delete-access-point --access-point-id fsap-0ace" \
  "aws --region us-west-2 efs delete-mount-target --mount-target-id fsmt-1" \
  "aws --region us-west-2 efs delete-mount-target --mount-target-id fsmt-2" \
  "aws --region us-west-2 efs delete-file-system --file-system-id fs-0feed" \
  "aws --region us-west-2 ec2 describe-security-groups --filters Name=vpc-id,Values=vpc-0abc Name=group-name,Values=cifar10-dp-efs --query SecurityGroups[0].GroupId --output text" \
  "aws --region us-west-2 ec2 delete-security-group --group-id sg-0123" \
  "aws --region us-west-2 ecr delete-repository --repository-name cifar10-dp --force" \
  "eksctl delete cluster -f $R/k8s/eks/cluster.yaml --wait"
check "security group retried while in use" test "$(grep -c 'delete-security-group' "$FAKE_LOG")" = 2
check "file system deleted only after its mount targets are gone" \
  test "$(grep -n 'length(MountTargets)' "$FAKE_LOG" | tail -n 1 | cut -d: -f1)" -lt "$(grep -n 'delete-file-system' "$FAKE_LOG" | cut -d: -f1)"
setting_is "EFS id cleared" EFS_ID fs-00000000000000000
fresh
script eks-cleanup.sh --yes --jobs-only
expect_rc 0 "clean-up --jobs-only"
not_called "--jobs-only keeps the volume" "delete -k"
not_called "--jobs-only keeps the cluster" "eksctl"

summary test_eks_scripts
