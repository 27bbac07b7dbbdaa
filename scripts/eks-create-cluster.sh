#!/usr/bin/env bash
# Creates the EKS cluster of k8s/eks/cluster.yaml with eksctl (CPU node group; GPU node group at
# 0 nodes unless --gpu-nodes) and points kubectl at it. Takes 15-20 minutes.
#
#   scripts/eks-create-cluster.sh [--gpu-nodes N]
#
# Needs eksctl, aws (credentials for the account) and kubectl.
# Exit codes: 0 done, 1 failure, 2 bad usage.
# shellcheck source=eks-lib.sh
. "$(dirname "$0")/eks-lib.sh"
gpu_nodes=0
while (($#)); do
  case $1 in
    --gpu-nodes) gpu_nodes=${2:-}; shift 2 || bad_usage "--gpu-nodes needs a value" ;;
    -h | --help) usage; exit 0 ;;
    *) bad_usage "unknown argument $1" ;;
  esac
done
[[ $gpu_nodes =~ ^[0-9]+$ ]] || bad_usage "--gpu-nodes wants a whole number, not '$gpu_nodes'"
need eksctl aws kubectl

say "creating cluster $CLUSTER in $REGION (${CLUSTER_CONFIG#"$ROOT"/})"
eksctl create cluster -f "$CLUSTER_CONFIG"
if ((gpu_nodes > 0)); then
  say "scaling node group gpu to $gpu_nodes"
  eksctl scale nodegroup --cluster "$CLUSTER" --region "$REGION" --name gpu --nodes "$gpu_nodes"
fi
aws eks update-kubeconfig --name "$CLUSTER" --region "$REGION"
kubectl get nodes -L cifar10-dp/pool,node.kubernetes.io/instance-type
if ((gpu_nodes > 0)); then
  say "next: scripts/eks-install-operators.sh --gpu"
else
  say "next: scripts/eks-install-operators.sh"
fi
