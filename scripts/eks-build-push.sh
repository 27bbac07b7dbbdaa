#!/usr/bin/env bash
# Builds the image (Dockerfile) and pushes it to the account's ECR repository cifar10-dp
# (created on first use, scanned on push), then writes its name into k8s/settings/settings.env.
#
#   scripts/eks-build-push.sh [--flavour cpu|gpu] [--tag TAG]
#
#   --flavour   cpu (Debian slim, default) or gpu (nvidia/cuda cuDNN runtime)
#   --tag       image tag (default: the git commit and flavour, e.g. 1a2b3c4-cpu)
# Needs docker with a running engine, and aws. Exit codes: 0 done, 1 failure, 2 bad usage.
# shellcheck source=eks-lib.sh
. "$(dirname "$0")/eks-lib.sh"
flavour=cpu tag=""
while (($#)); do
  case $1 in
    --flavour) flavour=${2:-}; shift 2 || bad_usage "--flavour needs a value" ;;
    --tag) tag=${2:-}; shift 2 || bad_usage "--tag needs a value" ;;
    -h | --help) usage; exit 0 ;;
    *) bad_usage "unknown argument $1" ;;
  esac
done
[[ $flavour == cpu || $flavour == gpu ]] || bad_usage "--flavour is cpu or gpu, not '$flavour'"
need docker aws
if [[ -z $tag ]]; then
  rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) || rev=local
  [[ -z $(git -C "$ROOT" status --porcelain 2>/dev/null) ]] || rev=$rev-dirty
  tag=$rev-$flavour
fi
account=$(aws sts get-caller-identity --query Account --output text)
[[ $account =~ ^[0-9]{12}$ ]] || die "aws sts get-caller-identity gave '$account', not an account id (credentials?)"
registry=$account.dkr.ecr.$REGION.amazonaws.com
image=$registry/cifar10-dp:$tag

if ! aws ecr describe-repositories --region "$REGION" --repository-names cifar10-dp >/dev/null 2>&1; then
  aws ecr create-repository --region "$REGION" --repository-name cifar10-dp \
    --image-scanning-configuration scanOnPush=true >/dev/null
  say "created ECR repository cifar10-dp"
fi
aws ecr get-login-password --region "$REGION" | docker login --username AWS --password-stdin "$registry"
docker build --build-arg "FLAVOUR=$flavour" -t "$image" "$ROOT"
docker push "$image"
set_setting IMAGE "$image"
if [[ $flavour == gpu ]]; then say "next: scripts/eks-deploy.sh --gpu"; else say "next: scripts/eks-deploy.sh"; fi
