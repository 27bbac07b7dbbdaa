#!/usr/bin/env bash
# TensorBoard for every run on the volume: applies k8s/tensorboard (a Deployment reading
# /efs-shared/runs read-only, and its Service), waits until it answers, then forwards a local
# port to it until Ctrl-C. Runs appear under their run id (RUN_ID/tensorboard).
#
#   scripts/eks-tensorboard.sh [--port N] [--no-forward] [--delete]
#
#   --port N       local port (default 6006): open http://localhost:N
#   --no-forward   apply and wait only (forward later: kubectl -n cifar10 port-forward svc/tensorboard N:6006)
#   --delete       remove the Deployment and Service again (the volume and runs stay)
# Exit codes: 0 done, 1 failure, 2 bad usage.
# shellcheck source=eks-lib.sh
. "$(dirname "$0")/eks-lib.sh"
port=6006 forward=1 delete=0
while (($#)); do
  case $1 in
    --port) port=${2:-}; shift 2 || bad_usage "--port needs a value" ;;
    --no-forward) forward=0; shift ;;
    --delete) delete=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) bad_usage "unknown argument $1" ;;
  esac
done
if [[ ! $port =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then bad_usage "--port wants a port number, 1-65535"; fi
need kubectl
if ((delete)); then
  kubectl -n "$NAMESPACE" delete deployment,service tensorboard --ignore-not-found --wait=true
  exit 0
fi
say "TensorBoard ($(setting TENSORBOARD_IMAGE)) over /efs-shared/runs"
kubectl apply -k "$K8S/tensorboard"
kubectl -n "$NAMESPACE" rollout status deployment/tensorboard --timeout=600s
((forward)) || exit 0
say "open http://localhost:$port (Ctrl-C stops the forwarding; --delete removes TensorBoard)"
exec kubectl -n "$NAMESPACE" port-forward service/tensorboard "$port:6006"
