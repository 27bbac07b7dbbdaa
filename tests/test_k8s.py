#!/usr/bin/env python3
"""Consistency of k8s/ as rendered by `kubectl kustomize` (every part, both training variants):
volume, claim and mount names and paths agree; every pod template carries the Istio opt-out,
runs as the image's uid and names the settings ConfigMap that is rendered beside it; the
settings reach the fields they set (also after changing them); the MPIJob has the fields the
runbook relies on; the GPU variant asks for GPUs on workers only; node selectors and taints
match the eksctl node groups; ports and paths agree with the Dockerfile and sshd config.
Prints "k8s manifests: N passed, M failed"; skips with a message without kubectl >= 1.21.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tally import Tally  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K8S = os.path.join(ROOT, "k8s")
PARTS = ["storage", "data", "train-cpu", "train-gpu", "test", "tensorboard"]
tally = Tally("k8s manifests")
check = tally.check


def kubectl():
    k = shutil.which("kubectl")
    if not k:
        return None
    try:
        out = subprocess.run([k, "version", "--client", "-o", "json"], capture_output=True, text=True).stdout
        minor = int(re.search(r'"minor":\s*"(\d+)', out).group(1))
    except (AttributeError, ValueError, OSError):
        return None
    return k if minor >= 21 else None


def render(k, k8s_dir, part):
    out = subprocess.run([k, "kustomize", os.path.join(k8s_dir, part)], capture_output=True, text=True)
    check("%s renders" % part, out.returncode == 0, out.stderr.strip())
    return [d for d in yaml.safe_load_all(out.stdout) if d] if out.returncode == 0 else []


def settings(k8s_dir):
    s = {}
    with open(os.path.join(k8s_dir, "settings", "settings.env")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                key, value = line.split("=", 1)
                s[key] = value
    return s


def pods(docs):
    """(label, pod spec, pod metadata, object) for every pod template in the documents."""
    for d in docs:
        if d["kind"] in ("Job", "Deployment"):
            t = d["spec"]["template"]
            yield "%s/%s" % (d["kind"], d["metadata"]["name"]), t["spec"], t.get("metadata", {}), d
        elif d["kind"] == "MPIJob":
            for role, r in d["spec"]["mpiReplicaSpecs"].items():
                t = r["template"]
                yield "MPIJob/%s/%s" % (d["metadata"]["name"], role), t["spec"], t.get("metadata", {}), d


def one(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    check("exactly one %s" % kind, len(found) == 1, "found %d" % len(found))
    return found[0] if found else {}


def namespace_of_scripts():
    with open(os.path.join(ROOT, "scripts", "eks-lib.sh")) as f:
        return re.search(r"^NAMESPACE=(\S+)", f.read(), re.M).group(1)


def check_parts(k, k8s_dir, tag):
    s = settings(k8s_dir)
    r = {p: render(k, k8s_dir, p) for p in PARTS}
    storage = r["storage"]
    sc, pv, pvc = one(storage, "StorageClass"), one(storage, "PersistentVolume"), one(storage, "PersistentVolumeClaim")
    if not (sc and pv and pvc):
        return
    check(tag + "PV uses the EFS CSI driver", pv["spec"]["csi"]["driver"] == "efs.csi.aws.com" == sc["provisioner"])
    check(tag + "PV handle = EFS_ID::EFS_ACCESS_POINT",
          pv["spec"]["csi"]["volumeHandle"] == "%s::%s" % (s["EFS_ID"], s["EFS_ACCESS_POINT"]), pv["spec"]["csi"]["volumeHandle"])
    check(tag + "PV and claim are ReadWriteMany",
          pv["spec"]["accessModes"] == ["ReadWriteMany"] == pvc["spec"]["accessModes"])
    check(tag + "claim binds the PV", pvc["spec"]["volumeName"] == pv["metadata"]["name"])
    check(tag + "one storage class for PV, claim and StorageClass",
          pv["spec"]["storageClassName"] == pvc["spec"]["storageClassName"] == sc["metadata"]["name"])
    check(tag + "PV keeps the data when released", pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain")
    ns = namespace_of_scripts()
    for part, docs in r.items():
        cms = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
        check(tag + "%s: one settings ConfigMap" % part, len(cms) == 1, str(list(cms)))
        for d in docs:
            if d["kind"] not in ("Namespace", "StorageClass", "PersistentVolume"):
                check(tag + "%s: %s/%s in namespace %s (scripts/eks-lib.sh)" % (part, d["kind"], d["metadata"]["name"], ns),
                      d["metadata"].get("namespace") == ns, str(d["metadata"].get("namespace")))
        for label, spec, meta, obj in pods(docs):
            where = "%s%s: %s" % (tag, part, label)
            check(where + " Istio sidecar off (label)", meta.get("labels", {}).get("sidecar.istio.io/inject") == "false")
            check(where + " Istio sidecar off (annotation)", meta.get("annotations", {}).get("sidecar.istio.io/inject") == "false")
            sc_ = spec.get("securityContext", {})
            check(where + " runs as uid 1000, non-root", sc_.get("runAsUser") == 1000 and sc_.get("runAsNonRoot") is True)
            check(where + " sets no fsGroup (it would loosen the ssh key's mode)", "fsGroup" not in sc_)
            vols = {v["name"]: v for v in spec.get("volumes", [])}
            efs = [n for n, v in vols.items() if "persistentVolumeClaim" in v]
            check(where + " mounts the claim", [vols[n]["persistentVolumeClaim"]["claimName"] for n in efs] == [pvc["metadata"]["name"]])
            for c in spec.get("initContainers", []) + spec["containers"]:
                cw = "%s/%s" % (where, c["name"])
                mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
                check(cw + " mounts only volumes the pod has", set(mounts) <= set(vols), str(mounts))
                check(cw + " has the volume at /efs-shared", [mounts.get(n) for n in efs] == ["/efs-shared"], str(mounts))
                image = s["TENSORBOARD_IMAGE"] if part == "tensorboard" else s["IMAGE"]
                check(cw + " runs the settings' image", c["image"] == image, c["image"])
                check(cw + " has a memory limit", "memory" in c.get("resources", {}).get("limits", {}))
                for e in c.get("envFrom", []):
                    check(cw + " reads a rendered ConfigMap", e["configMapRef"]["name"] in cms, e["configMapRef"]["name"])
                text = " ".join(c.get("command", []) + c.get("args", []))
                for ref in re.findall(r"\$\(([A-Z_]+)\)|\$\{?([A-Z_]+)\}?", text):
                    name = ref[0] or ref[1]
                    check(cw + " uses only defined settings ($%s)" % name, name in s)
    for variant in ("train-cpu", "train-gpu"):
        job = one(r[variant], "MPIJob")
        if not job:
            continue
        w = tag + variant + ": "
        spec = job["spec"]
        L, W = spec["mpiReplicaSpecs"]["Launcher"], spec["mpiReplicaSpecs"]["Worker"]
        check(w + "apiVersion kubeflow.org/v2beta1", job["apiVersion"] == "kubeflow.org/v2beta1")
        check(w + "Worker replicas = WORKERS", W["replicas"] == int(s["WORKERS"]), str(W["replicas"]))
        check(w + "slotsPerWorker = SLOTS_PER_WORKER", spec["slotsPerWorker"] == int(s["SLOTS_PER_WORKER"]))
        check(w + "launcher restarts on failure", L.get("restartPolicy") == "OnFailure")
        check(w + "a crashed worker restarts in place", W.get("restartPolicy") == "OnFailure")
        rp = spec.get("runPolicy", {})
        check(w + "runPolicy backoffLimit, cleanPodPolicy, ttlSecondsAfterFinished",
              rp.get("backoffLimit", 0) > 0 and rp.get("cleanPodPolicy") and rp.get("ttlSecondsAfterFinished", 0) > 0, str(rp))
        check(w + "launcher waits for ready workers", spec.get("launcherCreationPolicy") == "WaitForWorkersReady")
        launcher = L["template"]["spec"]["containers"][0]
        script = " ".join(launcher["args"])
        check(w + "mpirun with the operator's hostfile, no binding, -np WORKERS x SLOTS",
              re.search(r'mpirun --hostfile /etc/mpi/hostfile --bind-to none \\\s+-np "\$\(\(WORKERS \* SLOTS_PER_WORKER\)\)"', script) is not None, script)
        check(w + "model under this run's directory",
              '--model-file "/efs-shared/runs/$RUN_ID/cifar10-model.safetensors"' in script and script.rstrip().endswith("/efs-shared/cifar-10-batches-bin"))
        check(w + "TensorBoard events under this run's directory, where k8s/tensorboard looks",
              '--tensorboard-dir "/efs-shared/runs/$RUN_ID/tensorboard"' in script, script)
        wspec = W["template"]["spec"]
        worker = wspec["containers"][0]
        res = worker["resources"]
        prefix = "GPU_" if variant == "train-gpu" else ""
        check(w + "worker CPU request = limit = %sCPUS_PER_WORKER" % prefix,
              str(res["requests"]["cpu"]) == str(res["limits"]["cpu"]) == s[prefix + "CPUS_PER_WORKER"])
        check(w + "worker memory = %sMEMORY_PER_WORKER" % prefix,
              res["limits"]["memory"] == res["requests"]["memory"] == s[prefix + "MEMORY_PER_WORKER"])
        shm = [v for v in wspec["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"]
        check(w + "/dev/shm is a memory emptyDir",
              len(shm) == 1 and {"name": shm[0]["name"], "mountPath": "/dev/shm"} in worker["volumeMounts"])
        check(w + "worker runs the image's sshd config", worker["command"] == ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"])
        check(w + "launcher's PID 1 turns SIGTERM into the SIGUSR1 mpirun forwards",
              launcher["command"] == ["dumb-init", "--rewrite", "15:10", "--", "/bin/sh", "-c"] and "exec mpirun" in script,
              str(launcher["command"]))
        stop = " ".join(worker.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", []))
        check(w + "worker preStop: SIGUSR1 to the pod's ranks, then waits for them",
              "pkill -USR1 -x cifar10-train" in stop and "while pgrep -x cifar10-train" in stop, stop)
        check(w + "ready = sshd port 2222 open", worker["readinessProbe"]["tcpSocket"]["port"] == 2222)
        check(w + "ssh key mounted where sshd reads it", spec["sshAuthMountPath"] == "/home/mpiuser/.ssh")
        gpus = res["limits"].get("nvidia.com/gpu")
        lres = launcher.get("resources", {})
        check(w + "no GPU for the launcher", "nvidia.com/gpu" not in str(lres))
        check(w + "cifar10-train --device from the settings", '--device "$DEVICE"' in script, script)
        check(w + "cifar10-train's network and recipe from the settings",
              re.search(r'cifar10-train --model "\$MODEL" --epochs "\$EPOCHS" --batch-size "\$BATCH_SIZE"', script) is not None, script)
        env = {e["name"]: e.get("value") for e in launcher.get("env", [])}
        if variant == "train-gpu":
            check(w + "the launcher insists on GPUs (DEVICE=cuda)", env.get("DEVICE") == "cuda", str(env))
            check(w + "GPUs per worker = SLOTS_PER_WORKER", gpus == s["SLOTS_PER_WORKER"], str(gpus))
            check(w + "tolerates the GPU taint", {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in wspec.get("tolerations", []))
        else:
            check(w + "no GPUs", gpus is None)
            check(w + "DEVICE comes from the settings", "DEVICE" not in env, str(env))
    test = one(r["test"], "Job")
    if test:
        args = test["spec"]["template"]["spec"]["containers"][0]["args"]
        check(tag + "test Job gates on MIN_ACCURACY", args[:2] == ["--min-accuracy", "$(MIN_ACCURACY)"], str(args))
        check(tag + "test Job scores this run's model",
              "/efs-shared/runs/$(RUN_ID)/cifar10-model.safetensors" in args, str(args))
        check(tag + "test Job writes the scores as JSON beside the model",
              args[args.index("--json") + 1] == "/efs-shared/runs/$(RUN_ID)/test.json" if "--json" in args else False, str(args))
        rules = test["spec"].get("podFailurePolicy", {}).get("rules", [])
        check(tag + "a failed gate (exit 3) is not retried",
              any(x["action"] == "FailJob" and x["onExitCodes"]["values"] == [3] for x in rules))
    check_tensorboard(r["tensorboard"], tag)
    return r


# The instance types of k8s/eks/cluster.yaml's node groups: vCPUs, memory (GiB), the EKS AMI's
# max pods (ENI limits: it sets the memory reserve).
INSTANCE_TYPES = {"c7i.2xlarge": (8, 16, 58), "g5.xlarge": (4, 16, 58), "g6.xlarge": (4, 16, 58)}
# Requests of the daemon sets on every node (aws-node 25m, kube-proxy 100m, the EFS CSI node
# driver, the pod identity agent, the NVIDIA device plugin), rounded up.
DAEMONSETS_CPU, DAEMONSETS_GIB = 0.5, 1.0


def allocatable(itype):
    """What a node of that type offers pods: the EKS AMI's kube-reserved (CPU: 6% of the first
    core, 1% of the second, 0.5% of cores 3-4, 0.25% of the rest; memory: 255 MiB + 11 MiB per
    pod) and eviction threshold (100 MiB), and the daemon sets, off the instance's size (the
    kernel sees about 95% of the nominal memory)."""
    cpus, gib, max_pods = INSTANCE_TYPES[itype]
    reserved_cpu = 0.06 + 0.01 * (cpus > 1) + 0.005 * min(max(cpus - 2, 0), 2) + 0.0025 * max(cpus - 4, 0)
    reserved_gib = (255 + 11 * max_pods + 100) / 1024.0
    return cpus - reserved_cpu - DAEMONSETS_CPU, 0.95 * gib - reserved_gib - DAEMONSETS_GIB


def quantity(q, unit):
    """A Kubernetes quantity in CPUs (unit "cpu") or GiB (unit "mem")."""
    q = str(q)
    if unit == "cpu":
        return float(q[:-1]) / 1000 if q.endswith("m") else float(q)
    scale = {"Ki": 2 ** -20, "Mi": 2 ** -10, "Gi": 1, "Ti": 2 ** 10, "k": 1e3 / 2 ** 30, "M": 1e6 / 2 ** 30, "G": 1e9 / 2 ** 30}
    for suffix, f in scale.items():
        if q.endswith(suffix):
            return float(q[: -len(suffix)]) * f
    return float(q) / 2 ** 30


def pod_requests(spec):
    """A pod's effective requests (CPUs, GiB): the larger of its containers' sum and any
    init container's."""
    def req(c, unit, key):
        return quantity(c.get("resources", {}).get("requests", {}).get(key, "0"), unit)
    cpu = sum(req(c, "cpu", "cpu") for c in spec["containers"])
    mem = sum(req(c, "mem", "memory") for c in spec["containers"])
    for c in spec.get("initContainers", []):
        cpu, mem = max(cpu, req(c, "cpu", "cpu")), max(mem, req(c, "mem", "memory"))
    return cpu, mem


def misfits(rendered, k8s_dir):
    """Pods that do not fit one node of some instance type of a node group they can be scheduled
    on (its labels match their nodeSelector, they tolerate its taints), or fit no group."""
    with open(os.path.join(k8s_dir, "eks", "cluster.yaml")) as f:
        groups = yaml.safe_load(f)["managedNodeGroups"]
    out = []
    for part, docs in rendered.items():
        for label, spec, _, _ in pods(docs):
            sel = spec.get("nodeSelector", {})
            tol = spec.get("tolerations", [])
            cpu, mem = pod_requests(spec)
            fits_some = False
            for g in groups:
                labels = g.get("labels", {})
                tolerated = all(any(t.get("key") == x["key"] and t.get("effect") == x["effect"] for t in tol)
                                for x in g.get("taints", []))
                if not tolerated or any(labels.get(k_) != v for k_, v in sel.items()):
                    continue
                fits_some = True
                for itype in g.get("instanceTypes", [g.get("instanceType")]):
                    a_cpu, a_mem = allocatable(itype)
                    if cpu > a_cpu or mem > a_mem:
                        out.append("%s %s: requests %.2f CPUs, %.1f GiB; a %s node (group %s) offers %.2f, %.1f"
                                   % (part, label, cpu, mem, itype, g["name"], a_cpu, a_mem))
            if not fits_some:
                out.append("%s %s: no node group it can be scheduled on" % (part, label))
    return out


def check_tensorboard(docs, tag):
    """TensorBoard reads every run's directory read-only, serves on the port its Service
    forwards, and loads with the Python loader (which honours a resumed run's SessionLog START)."""
    dep, svc = one(docs, "Deployment"), one(docs, "Service")
    if not (dep and svc):
        return
    w = tag + "tensorboard: "
    spec = dep["spec"]["template"]["spec"]
    c = spec["containers"][0]
    args = c["command"] + c["args"]
    check(w + "tensorboard --logdir=/efs-shared/runs (every run's directory)",
          args[0] == "tensorboard" and "--logdir=/efs-shared/runs" in args, str(args))
    check(w + "Python loader (--load_fast=false)", "--load_fast=false" in args, str(args))
    check(w + "listens on all addresses", "--bind_all" in args, str(args))
    port = next(p for p in c["ports"] if p["name"] == "http")["containerPort"]
    check(w + "--port = containerPort", "--port=%d" % port in args, str(args))
    check(w + "volume mounted read-only", all(m.get("readOnly") for m in c["volumeMounts"]) and
          all(v["persistentVolumeClaim"].get("readOnly") for v in spec["volumes"] if "persistentVolumeClaim" in v))
    labels = dep["spec"]["template"]["metadata"]["labels"]
    check(w + "Service selects the pods", svc["spec"]["selector"].items() <= labels.items(), str(svc["spec"]["selector"]))
    check(w + "Deployment selects its pods", dep["spec"]["selector"]["matchLabels"].items() <= labels.items())
    sp = svc["spec"]["ports"][0]
    check(w + "Service port 6006 to the container's http port",
          sp["port"] == 6006 and sp["targetPort"] in ("http", port), str(sp))
    check(w + "ready when it answers HTTP", c["readinessProbe"]["httpGet"]["port"] in ("http", port))


def check_cluster_and_image(rendered):
    with open(os.path.join(K8S, "eks", "cluster.yaml")) as f:
        cfg = yaml.safe_load(f)
    groups = {g["name"]: g for g in cfg["managedNodeGroups"]}
    for variant, pool in (("train-cpu", "cpu"), ("train-gpu", "gpu")):
        job = [d for d in rendered[variant] if d["kind"] == "MPIJob"][0]
        sel = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"].get("nodeSelector", {})
        check("%s workers select node group %s" % (variant, pool), sel == groups[pool]["labels"], str(sel))
    gpu = groups["gpu"]
    types = gpu.get("instanceTypes", [gpu.get("instanceType")])
    check("GPU node group: CUDA 13 capable instance types only (no p2/p3/g3/g4dn)",
          all(re.match(r"(g5|g6|g6e|p4d|p4de|p5|p5e|p5en)\.", t) for t in types), str(types))
    check("GPU node group tainted as the variant tolerates",
          {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"} in gpu.get("taints", []))
    with open(os.path.join(K8S, "image", "sshd_config")) as f:
        sshd = f.read()
    with open(os.path.join(K8S, "image", "ssh_config")) as f:
        ssh = f.read()
    with open(os.path.join(ROOT, "Dockerfile")) as f:
        docker = f.read()
    check("sshd and ssh client agree on port 2222",
          re.search(r"^Port 2222$", sshd, re.M) and re.search(r"^\s*Port 2222$", ssh, re.M) and "EXPOSE 2222" in docker)
    check("sshd host key = the mounted key", re.search(r"^HostKey /home/mpiuser/\.ssh/id_rsa$", sshd, re.M) is not None)
    check("sshd StrictModes no", re.search(r"^StrictModes no$", sshd, re.M) is not None)
    check("ssh client writes no known_hosts", re.search(r"^\s*UserKnownHostsFile /dev/null$", ssh, re.M) is not None)
    check("image user is uid 1000", "--uid 1000" in docker and "USER 1000" in docker)
    check("image puts the sshd config where the workers read it",
          "k8s/image/sshd_config /home/mpiuser/.sshd_config" in docker)


def main():
    k = kubectl()
    if not k:
        print("k8s manifests: skipped: no kubectl >= 1.21 with kustomize (Debian's kubernetes-client is older)")
        return 0
    rendered = check_parts(k, K8S, "")
    check_cluster_and_image(rendered)
    bad = misfits(rendered, K8S)
    check("every pod's requests fit a node of its node group (k8s/eks/cluster.yaml)", not bad, "; ".join(bad))
    # The settings reach their fields after a change too (in a copy).
    tmp = tempfile.mkdtemp()
    try:
        copy = os.path.join(tmp, "k8s")
        shutil.copytree(K8S, copy)
        env_path = os.path.join(copy, "settings", "settings.env")
        with open(env_path) as f:
            text = f.read()
        for key, value in (("WORKERS", "5"), ("SLOTS_PER_WORKER", "4"), ("CPUS_PER_WORKER", "12"),
                           ("MEMORY_PER_WORKER", "30Gi"), ("GPU_CPUS_PER_WORKER", "6"), ("GPU_MEMORY_PER_WORKER", "9Gi"), ("EFS_ID", "fs-0123456789abcdef0"),
                           ("EFS_ACCESS_POINT", "fsap-0fedcba9876543210"), ("IMAGE", "1.dkr.ecr.x.amazonaws.com/c:t"),
                           ("TENSORBOARD_IMAGE", "registry.example/tensorboard:1")):
            text = re.sub(r"^%s=.*$" % key, "%s=%s" % (key, value), text, flags=re.M)
        with open(env_path, "w") as f:
            f.write(text)
        changed = check_parts(k, copy, "changed settings: ")
        bad = misfits(changed, copy)
        check("the fit check catches 6 CPUs on a 4-vCPU GPU node",
              any("train-gpu MPIJob/cifar10-train/Worker" in b and "g6.xlarge" in b for b in bad), "; ".join(bad))
        check("the fit check catches 12 CPUs on an 8-vCPU CPU node",
              any("train-cpu MPIJob/cifar10-train/Worker" in b and "c7i.2xlarge" in b for b in bad), "; ".join(bad))
    finally:
        shutil.rmtree(tmp)
    return tally.report()


sys.exit(main())
