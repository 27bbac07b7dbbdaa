#!/usr/bin/env bash
# Runs the job on the cluster in order, waiting for each step: the EFS volume (claim Bound),
# the data-prep Job (Complete), the training MPIJob (Succeeded), then the test Job, whose log
# is printed and whose verdict is this script's exit status. Each deploy gets a new RUN_ID
# (written into k8s/settings/settings.env), so the test scores this run's model.
#
#   scripts/eks-deploy.sh [--gpu] [--run-id ID] [--no-wait] [--replace] [--train-hours H]
#
#   --gpu          the GPU training variant (k8s/train-gpu) instead of k8s/train-cpu
#   --run-id ID    use this run id (an existing one resumes from its checkpoint on EFS)
#   --no-wait      apply all steps at once and return; the pods' init containers still hold
#                  training until the data is there and the test until this run's model is
#   --replace      stop a training MPIJob that is still running instead of refusing
#   --train-hours  how long to wait for training (default 12)
# Exit codes: 0 the model passed the test, 1 a step failed (or the model is below
# MIN_ACCURACY), 2 bad usage.
# shellcheck source=eks-lib.sh
. "$(dirname "$0")/eks-lib.sh"
gpu=0 run_id="" wait=1 replace=0 train_hours=12
while (($#)); do
  case $1 in
    --gpu) gpu=1; shift ;;
    --run-id) run_id=${2:-}; shift 2 || bad_usage "--run-id needs a value" ;;
    --no-wait) wait=0; shift ;;
    --replace) replace=1; shift ;;
    --train-hours) train_hours=${2:-}; shift 2 || bad_usage "--train-hours needs a value" ;;
    -h | --help) usage; exit 0 ;;
    *) bad_usage "unknown argument $1" ;;
  esac
done
[[ -z $run_id || $run_id =~ ^[a-z0-9][a-z0-9.-]*$ ]] || bad_usage "--run-id: lower-case letters, digits, '.' and '-' only"
[[ $train_hours =~ ^[0-9]+$ ]] || bad_usage "--train-hours wants a whole number of hours"
need kubectl
[[ $(setting EFS_ID) != fs-00000000000000000 ]] || die "settings.env names no EFS file system yet: run scripts/eks-create-efs.sh"
[[ $(setting IMAGE) == */* ]] || die "IMAGE=$(setting IMAGE) in settings.env is not in a registry: run scripts/eks-build-push.sh"
variant=train-cpu
((gpu)) && variant=train-gpu
k() { kubectl -n "$NAMESPACE" "$@"; }
# The condition types that are True on KIND/NAME (space-separated; empty when it does not exist).
conditions() { k get "$1" "$2" --ignore-not-found -o jsonpath='{.status.conditions[?(@.status=="True")].type}'; }
has() { [[ " $1 " == *" $2 "* ]]; }

# wait_for KIND NAME DONE SECONDS LOGS: polls until condition DONE (success) or Failed.
wait_for() {
  local kind=$1 name=$2 done=$3 seconds=$4 logs=$5 c last="" line shown="" start=$SECONDS
  while :; do
    c=$(conditions "$kind" "$name")
    [[ $c != "$last" ]] && say "$kind/$name: ${c:-pending}"
    last=$c
    if has "$c" "$done"; then return 0; fi
    if has "$c" Failed; then
      k logs "$logs" --tail=30 >&2 || true
      die "$kind/$name failed (log above; kubectl -n $NAMESPACE describe $kind $name)"
    fi
    line=$(k logs "$logs" --tail=100 2>/dev/null | grep '^epoch ' | tail -n 1) || true
    [[ -n $line && $line != "$shown" ]] && say "$line"
    shown=${line:-$shown}
    ((SECONDS - start < seconds)) || die "$kind/$name: not $done after $seconds s"
    sleep "$POLL_SECONDS"
  done
}

if [[ -n $(k get mpijob cifar10-train --ignore-not-found -o name) ]]; then
  c=$(conditions mpijob cifar10-train)
  if ! has "$c" Succeeded && ! has "$c" Failed && ((!replace)); then
    die "the MPIJob cifar10-train of an earlier deploy is still running (${c:-pending}); let it finish, or pass --replace to stop it"
  fi
fi
[[ -n $run_id ]] || run_id=run-$(date -u +%Y%m%d-%H%M%S)
set_setting RUN_ID "$run_id"

say "1/4 the EFS volume"
kubectl apply -k "$K8S/storage"
k wait --for=jsonpath='{.status.phase}'=Bound pvc/cifar10-efs --timeout=300s

say "2/4 CIFAR-10 onto the volume"
k delete job cifar10-data --ignore-not-found --wait=true
kubectl apply -k "$K8S/data"
((wait)) && wait_for job cifar10-data Complete 3600 job/cifar10-data

say "3/4 training ($variant, run $run_id)"
k delete mpijob cifar10-train --ignore-not-found --wait=true
k delete job cifar10-test --ignore-not-found --wait=true
kubectl apply -k "$K8S/$variant"
((wait)) && wait_for mpijob cifar10-train Succeeded $((train_hours * 3600)) job/cifar10-train-launcher

say "4/4 testing the model of run $run_id"
kubectl apply -k "$K8S/test"
if ((!wait)); then
  say "applied; follow with scripts/eks-status.sh --follow"
  exit 0
fi
wait_for job cifar10-test Complete 3600 job/cifar10-test
k logs job/cifar10-test
say "run $run_id passed: model /efs-shared/runs/$run_id/cifar10-model.safetensors"
