#!/usr/bin/env bash
# Shows the jobs and pods of cifar10-dp on the cluster and what the nodes and pods use (CPU
# cores, memory: `kubectl top`, from metrics-server); --follow then streams the training
# launcher's log (mpirun's output: the loss lines and per-epoch summaries) until it ends.
#
#   scripts/eks-status.sh [--follow | --test-log]
#
# Exit codes: 0 done, 1 failure, 2 bad usage.
# shellcheck source=eks-lib.sh
. "$(dirname "$0")/eks-lib.sh"
follow=0 test_log=0
while (($#)); do
  case $1 in
    --follow) follow=1; shift ;;
    --test-log) test_log=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) bad_usage "unknown argument $1" ;;
  esac
done
need kubectl
say "run $(setting RUN_ID), namespace $NAMESPACE"
kubectl -n "$NAMESPACE" get mpijobs,jobs,pods,pvc -o wide
# Utilisation: a training worker should use about its CPU limit (CPUS_PER_WORKER).
say "CPU and memory in use (kubectl top)"
if ! kubectl top nodes || ! kubectl -n "$NAMESPACE" top pods --containers; then
  say "no figures yet: metrics-server (scripts/eks-install-operators.sh) needs a minute after pods start"
fi
if ((follow)); then
  kubectl -n "$NAMESPACE" logs -f job/cifar10-train-launcher
elif ((test_log)); then
  kubectl -n "$NAMESPACE" logs job/cifar10-test
fi
