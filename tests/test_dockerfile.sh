#!/usr/bin/env bash
# The Dockerfile, checked without a Docker engine:
#  - the build stage runs scripts/install-deps.sh and make, the two steps .ci/run takes; its RUN
#    lines are executed here, in a clean copy of the tracked files (as COPY . . gives them), with
#    the CPU flavour's MAKE_FLAGS;
#  - every file the runtime stage copies from the build stage exists after that build;
#  - every shared library ldd reports for the binaries comes from a package the runtime
#    stage installs, one they depend on, or the base image (Debian's required packages);
#  - the runtime stage installs no compiler, make or -dev package and copies no key;
#  - the sshd config parses (sshd -t, with a stand-in key) and the ssh client config gives
#    port 2222, no host key checking, no known_hosts.
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/.." && pwd)
# The Dockerfile with continuation lines joined.
joined=$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$SRC/Dockerfile")
# stage NAME: the instructions of stage NAME ("final": the last stage), FROM line included.
stage() {
  awk -v want="$1" '
    /^FROM / { n++; name = (tolower($(NF-1)) == "as") ? $NF : ""; cur = (want == name) }
    { lines[n] = lines[n] $0 "\n"; if (cur) print }
    END { if (want == "final") printf "%s", lines[n] }' <<<"$joined"
}
build=$(stage build)
final=$(stage final)
check "a build stage" test -n "$build"
check "a final stage" test -n "$final"

# 1. The build stage's commands are CI's.
mapfile -t build_runs < <(sed -n 's/^RUN //p' <<<"$build")
check "build stage: install-deps.sh, then make (got: ${build_runs[*]})" \
  test "${#build_runs[@]}" = 2 -a "${build_runs[0]}" = "scripts/install-deps.sh" -a "${build_runs[1]%% *}" = make
check ".ci/run runs the same install script and make" grep -qx 'scripts/install-deps.sh --test' "$SRC/.ci/run"
check ".ci/run runs make test" grep -qx 'make test' "$SRC/.ci/run"
check ".ci/run builds and checks the image (scripts/image-test.sh, under a time limit)" grep -qxE 'tests/limit.sh [0-9]+ scripts/image-test.sh' "$SRC/.ci/run"
cpu_flags=$(stage build-cpu | sed -n 's/^ENV MAKE_FLAGS="\(.*\)"$/\1/p')
check "the CPU flavour builds with CUDA=0" test "$cpu_flags" = "CUDA=0"
gpu_flags=$(stage build-gpu | sed -n 's/^ENV MAKE_FLAGS="\(.*\)"$/\1/p')
check "the GPU flavour insists on the CUDA backend (CUDA=1)" test "$gpu_flags" = "CUDA=1"
workdir=$(sed -n 's/^WORKDIR //p' <<<"$build")
check "build stage works in /src" test "$workdir" = /src
mkdir -p "$T/src"
git -C "$SRC" ls-files -z | (cd "$SRC" && xargs -0 cp --parents -t "$T/src")
(
  cd "$T/src" || exit 1
  # The image's build sees none of this run's make settings: `make BUILD=DIR test` passes BUILD
  # on (environment, MAKEFLAGS), and the copy's make would rebuild DIR, without the CUDA backend.
  unset BUILD OPT CFLAGS CUDA CUDA_ARCH SANITIZE FUZZ MAKEFLAGS MFLAGS MAKELEVEL
  export MAKE_FLAGS=$cpu_flags
  for r in "${build_runs[@]}"; do sh -c "$r" >"$T/build.log" 2>&1 || { tail -n 20 "$T/build.log"; exit 1; }; done
)
check "the build stage's RUN lines succeed in a clean copy" test $? = 0
check "the build printed CUDA off" grep -q "CUDA: off (CUDA=0)" "$T/build.log"

# 2. What the runtime stage copies from the build stage exists: the programs, and the CUDA
# plugin's directory (empty in this flavour), where the programs look for it (bin/../lib).
mapfile -t copy_lines < <(sed -n 's/^COPY --from=build //p' <<<"$final")
check "runtime copies twice from the build (got ${#copy_lines[@]})" test "${#copy_lines[@]}" = 2
check "runtime copies the plugin directory to /usr/local/lib" test "${copy_lines[1]}" = "/src/build/lib/ /usr/local/lib/"
check "the build made the plugin directory" test -d "$T/src/build/lib/cifar10-dp"
copies=${copy_lines[0]}
read -r -a words <<<"$copies"
dest=${words[-1]}
bins=()
for f in "${words[@]:0:${#words[@]}-1}"; do
  check "runtime copies $f from the build" test -e "$T${f}"
  [[ $f == */build/* ]] && bins+=("$T$f")
done
check "runtime holds the three programs and get-data.sh in $dest" \
  test "$copies" = "/src/build/cifar10-train /src/build/cifar10-test /src/build/cifar10-predict /src/scripts/get-data.sh /usr/local/bin/"

# 3. Libraries: each from a runtime package, a dependency of one, or Debian's required set.
# $IMAGE_LIBS: the CPU flavour's value (its ENV in the runtime-cpu stage)
image_libs=$(stage runtime-cpu | sed -n 's/^ENV IMAGE_LIBS="\(.*\)"$/\1/p')
check "the CPU runtime names its picture libraries (ENV IMAGE_LIBS)" test -n "$image_libs"
mapfile -t pkgs < <(sed -n 's/^RUN apt-get update.*apt-get install -y --no-install-recommends \(.*\)&& rm -rf.*/\1/p' <<<"$final" |
  sed "s/\\\$IMAGE_LIBS/$image_libs/" | tr -s ' ' '\n' | sed '/^$/d')
check "runtime installs packages (${pkgs[*]})" test "${#pkgs[@]}" -ge 4
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
  --no-replaces --no-enhances "${pkgs[@]}" 2>/dev/null | grep -v '^ ' | grep -v '^<' | sort -u)
check "apt-cache knows the runtime packages (apt-get update run?)" test "$(wc -l <<<"$closure")" -gt "${#pkgs[@]}"
from_package() { # the package that owns a library path (Debian's /lib is /usr/lib)
  local p real
  real=$(readlink -f "$1")
  for p in "$1" "$real" "/usr${1#/usr}" "${1#/usr}" "/usr${real#/usr}" "${real#/usr}"; do
    dpkg -S "$p" 2>/dev/null | head -n 1 | cut -d: -f1 && return
  done
}
base_image() { # Debian's required or essential packages: what debian:12-slim holds
  dpkg-query -W -f='${Essential} ${Priority}\n' "$1" 2>/dev/null | grep -qE '^yes|required$'
}
for b in "${bins[@]}"; do
  name=$(basename "$b")
  check "$name: every library resolves" bash -c "! ldd '$b' | grep -q 'not found'"
  while read -r lib; do
    pkg=$(from_package "$lib")
    if [[ -n $pkg ]] && { grep -qx "$pkg" <<<"$closure" || base_image "$pkg"; }; then
      pass
    else
      fail "$name: $lib (package '${pkg:-none}') comes from no runtime package nor the base image"
    fi
  done < <(ldd "$b" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p')
done
for p in gcc cpp make build-essential libc6-dev; do
  check "runtime has no $p" bash -c "! grep -qx '$p' <<<\"\$0\"" "$closure"
done
check "runtime installs no -dev package" bash -c "! printf '%s\n' \"\$@\" | grep -q -- '-dev$'" _ "${pkgs[@]}"
check "runtime copies no key" bash -c "! grep -qiE 'id_rsa|id_ecdsa|\.pem|ssh_host_' <<<\"\$0\"" "$(grep '^COPY' <<<"$final")"
# openssh-server's postinst generates host keys; the install's RUN must remove them (the built
# image's own check: scripts/image-test.sh).
keys_run=$(grep -m1 '^RUN .*openssh-server' <<<"$final")
check "runtime removes the host keys openssh-server generates, in the same RUN" \
  grep -q 'rm -rf .*/etc/ssh/ssh_host_\*' <<<"$keys_run"
check "no '# syntax=' directive (BuildKit would fetch a frontend image: offline builds fail)" \
  bash -c "! grep -qiE '^# *syntax *=' '$SRC/Dockerfile'"
check "runtime runs as uid 1000" grep -qx "USER 1000" <<<"$final"
check "runtime turns off CMA single-copy (no ptrace in pods)" grep -qx "ENV OMPI_MCA_btl_vader_single_copy_mechanism=none" <<<"$final"
check ".dockerignore keeps .git and build outputs out" bash -c "grep -qx .git '$SRC/.dockerignore' && grep -qx build '$SRC/.dockerignore'"

# 4. ssh configuration.
if [[ -x /usr/sbin/sshd ]]; then
  mkdir -p "$T/home/.ssh"
  ssh-keygen -q -t ecdsa -N "" -f "$T/home/.ssh/id_rsa"
  cp "$T/home/.ssh/id_rsa.pub" "$T/home/.ssh/authorized_keys"
  sed "s|/home/mpiuser|$T/home|g" "$SRC/k8s/image/sshd_config" >"$T/sshd_config"
  # sshd -t as root wants its privilege separation directory (the image creates it too).
  if ((EUID == 0)); then mkdir -p /run/sshd; fi
  run /usr/sbin/sshd -t -f "$T/sshd_config"
  expect_rc 0 "sshd -t accepts k8s/image/sshd_config: $(cat "$T/err")"
else
  echo "test_dockerfile: skipped sshd -t: no /usr/sbin/sshd (scripts/install-deps.sh --test installs openssh-server)"
fi
ssh -G -F "$SRC/k8s/image/ssh_config" cifar10-train-worker-0 >"$T/out"
expect_out "ssh client port 2222" "^port 2222$"
expect_out "ssh client: no host key checking" "^stricthostkeychecking (false|no)$"
expect_out "ssh client: no known_hosts" "^userknownhostsfile /dev/null$"
expect_out "ssh client: a silent worker is dropped after 3 x 10 s" "^serveraliveinterval 10$"
expect_out "ssh client: keepalive count" "^serveralivecountmax 3$"

summary test_dockerfile
