#!/usr/bin/env python3
"""Prints what a container of a rendered manifest would run, as Kubernetes would run it.

    manifest-command.py RENDERED.yaml KIND/NAME[/ROLE] CONTAINER[:preStop] ENV_OUT ARGV_OUT

RENDERED.yaml is `kubectl kustomize` output. ROLE is the MPIJob replica (Launcher, Worker).
CONTAINER is searched in initContainers and containers. Writes the container's environment
(envFrom ConfigMaps, then env) as NUL-separated KEY=VALUE to ENV_OUT, and command + args, with
$(VAR) references expanded from that environment as the kubelet does ($$ escapes), as
NUL-separated words to ARGV_OUT. With CONTAINER:preStop, ARGV_OUT gets the container's preStop
exec hook instead (the kubelet runs it as is, without $(VAR) expansion). Used by
scripts/rehearse-local.sh and scripts/rehearse-hosts.sh; exit 1 with one line on stderr when the
object, container, hook or a referenced ConfigMap is missing.
"""
import re
import sys

import yaml


def fail(msg):
    sys.stderr.write("manifest-command.py: %s\n" % msg)
    sys.exit(1)


def expand(text, env):
    # Kubernetes: $(VAR) -> value when VAR is defined, else left as is; $$ -> $.
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, text)


def main():
    if len(sys.argv) != 6:
        fail("usage: RENDERED.yaml KIND/NAME[/ROLE] CONTAINER ENV_OUT ARGV_OUT")
    path, ref, cname, env_out, argv_out = sys.argv[1:]
    cname, _, hook = cname.partition(":")
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    parts = ref.split("/")
    kind, name = parts[0], parts[1]
    obj = next((d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name), None)
    if obj is None:
        fail("%s: no %s %s" % (path, kind, name))
    if kind == "MPIJob":
        if len(parts) != 3:
            fail("an MPIJob needs a replica: MPIJob/NAME/Launcher or /Worker")
        pod = obj["spec"]["mpiReplicaSpecs"][parts[2]]["template"]["spec"]
    else:
        pod = obj["spec"]["template"]["spec"]
    containers = pod.get("initContainers", []) + pod.get("containers", [])
    c = next((c for c in containers if c["name"] == cname), None)
    if c is None:
        fail("%s: %s has no container %s" % (path, ref, cname))
    env = {}
    for src in c.get("envFrom", []):
        cm_name = src["configMapRef"]["name"]
        cm = next((d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == cm_name), None)
        if cm is None:
            fail("%s: container %s reads ConfigMap %s, which is not in the manifests" % (path, cname, cm_name))
        env.update(cm.get("data", {}))
    for e in c.get("env", []):
        if "value" not in e:
            fail("%s: env %s of %s is not a plain value" % (path, e["name"], cname))
        env[e["name"]] = expand(str(e["value"]), env)
    if hook:
        argv = [str(w) for w in c.get("lifecycle", {}).get(hook, {}).get("exec", {}).get("command", [])]
        if not argv:
            fail("%s: container %s has no %s exec hook" % (path, cname, hook))
    else:
        argv = [expand(str(w), env) for w in c.get("command", []) + c.get("args", [])]
    if not argv:
        fail("%s: container %s has no command (it would run the image's default)" % (path, cname))
    with open(env_out, "w") as f:
        f.write("".join("%s=%s\0" % kv for kv in env.items()))
    with open(argv_out, "w") as f:
        f.write("".join(w + "\0" for w in argv))


main()
