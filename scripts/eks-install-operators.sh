#!/usr/bin/env bash
# Installs what the jobs need on the cluster: the pinned mpi-operator release (MPIJob v2beta1),
# the Amazon EFS CSI driver (EKS add-on, with an IAM role for its controller), metrics-server
# (for `kubectl top` in eks-status.sh; skipped when the cluster has one), and with --gpu the
# NVIDIA device plugin (nvidia.com/gpu) where the cluster has none: eksctl already installs one
# (often newer) on AL2023 GPU node groups, and a second would downgrade or fight it. Safe to
# run again.
#
#   scripts/eks-install-operators.sh [--gpu]
#
# Exit codes: 0 done, 1 failure, 2 bad usage.
# shellcheck source=eks-lib.sh
. "$(dirname "$0")/eks-lib.sh"
MPI_OPERATOR_VERSION=v0.6.0
NVIDIA_PLUGIN_VERSION=v0.17.2
METRICS_SERVER_VERSION=v0.7.2
gpu=0
while (($#)); do
  case $1 in
    --gpu) gpu=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) bad_usage "unknown argument $1" ;;
  esac
done
need eksctl aws kubectl

say "mpi-operator $MPI_OPERATOR_VERSION"
kubectl apply --server-side \
  -f "https://raw.githubusercontent.com/kubeflow/mpi-operator/$MPI_OPERATOR_VERSION/deploy/v2beta1/mpi-operator.yaml"
kubectl wait --for=condition=established --timeout=120s crd/mpijobs.kubeflow.org
kubectl -n mpi-operator rollout status deployment/mpi-operator --timeout=300s

say "EFS CSI driver (EKS add-on aws-efs-csi-driver)"
account=$(aws sts get-caller-identity --query Account --output text)
[[ $account =~ ^[0-9]{12}$ ]] || die "aws sts get-caller-identity gave '$account', not an account id (credentials?)"
role=$CLUSTER-efs-csi-driver
eksctl create iamserviceaccount --cluster "$CLUSTER" --region "$REGION" --namespace kube-system \
  --name efs-csi-controller-sa --role-name "$role" --role-only \
  --attach-policy-arn arn:aws:iam::aws:policy/service-role/AmazonEFSCSIDriverPolicy --approve
eksctl create addon --cluster "$CLUSTER" --region "$REGION" --name aws-efs-csi-driver \
  --service-account-role-arn "arn:aws:iam::$account:role/$role" --force
kubectl -n kube-system rollout status deployment/efs-csi-controller --timeout=300s

if [[ -n $(kubectl -n kube-system get deployment metrics-server --ignore-not-found -o name) ]]; then
  say "metrics-server: already installed"
else
  say "metrics-server $METRICS_SERVER_VERSION"
  kubectl apply -f "https://github.com/kubernetes-sigs/metrics-server/releases/download/$METRICS_SERVER_VERSION/components.yaml"
fi
kubectl -n kube-system rollout status deployment/metrics-server --timeout=300s

if ((gpu)); then
  present=$(kubectl get daemonsets --all-namespaces -o custom-columns=NS:.metadata.namespace,NAME:.metadata.name --no-headers |
    awk '$2 ~ /nvidia-device-plugin/ { print $1 "/" $2; exit }')
  if [[ -n $present ]]; then
    say "NVIDIA device plugin: already installed ($present), left as it is"
  else
    say "NVIDIA device plugin $NVIDIA_PLUGIN_VERSION"
    kubectl apply -f "https://raw.githubusercontent.com/NVIDIA/k8s-device-plugin/$NVIDIA_PLUGIN_VERSION/deployments/static/nvidia-device-plugin.yml"
    kubectl -n kube-system rollout status daemonset/nvidia-device-plugin-daemonset --timeout=300s
  fi
fi
say "next: scripts/eks-create-efs.sh"
