#!/usr/bin/env python3
"""Checks the TensorBoard event files cifar10-train wrote against its metrics file.

    check_tensorboard.py DIR METRICS            check DIR's event files against METRICS
    check_tensorboard.py --inject DIR STEP      append a stale train/loss point at STEP to the
                                                newest event file (what a killed run leaves)

Two readers, each must agree with the metrics file (the JSON Lines records of the same run):
  1. An independent decoder written here from the format's definition: TFRecord framing (length,
     masked CRC-32C of the length, data, masked CRC-32C of the data; CRC-32C computed bit by bit
     here and checked on its standard test vector) and a generic protocol-buffer decoder for
     Event, Summary, SessionLog and TensorProto. It applies TensorBoard's rule for SessionLog
     START (points at or past its step are dropped).
  2. TensorBoard's own EventAccumulator, when the `tensorboard` package can be imported (from
     $TENSORBOARD_PYTHONPATH or the interpreter's path); otherwise it says so and is skipped.

What must hold: every file starts with file_version "brain.Event:2" and then a START; the
scalars left after the purges are exactly the metrics file's: train/loss, train/learning_rate,
train/images_per_s at each step record's global_step, the epoch scalars at each epoch record's
(epoch/test_accuracy only where measured), final/test_accuracy; values equal to the metrics
file's as float32 (the metrics file prints 9 significant digits: relative 1e-7); the settings
text names the run and holds the run's config JSON.
"""
import glob
import json
import math
import os
import struct
import sys
import time


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """The records of one file; a torn last record (a killed writer) is reported and ignored."""
    data = open(path, "rb").read()
    at, out = 0, []
    while at < len(data):
        if len(data) - at < 12:
            print(f"note: {path}: torn record at byte {at} (ignored)")
            break
        (n,) = struct.unpack_from("<Q", data, at)
        (hcrc,) = struct.unpack_from("<I", data, at + 8)
        assert hcrc == masked(data[at : at + 8]), f"{path}: bad length CRC at byte {at}"
        if len(data) - at < 16 + n:
            print(f"note: {path}: torn record at byte {at} (ignored)")
            break
        body = data[at + 12 : at + 12 + n]
        (dcrc,) = struct.unpack_from("<I", data, at + 12 + n)
        assert dcrc == masked(body), f"{path}: bad data CRC at byte {at}"
        out.append(body)
        at += 16 + n
    return out


def varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def fields(b):
    """{field number: [values]}: ints for varints, bytes for fixed and length-delimited."""
    out, i = {}, 0
    while i < len(b):
        key, i = varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(b, i)
        elif wire == 1:
            v, i = b[i : i + 8], i + 8
        elif wire == 5:
            v, i = b[i : i + 4], i + 4
        elif wire == 2:
            n, i = varint(b, i)
            v, i = b[i : i + n], i + n
        else:
            raise AssertionError(f"wire type {wire}")
        assert i <= len(b), "field runs past its message"
        out.setdefault(num, []).append(v)
    return out


def decode_event(body):
    f = fields(body)
    ev = {"wall_time": struct.unpack("<d", f[1][0])[0], "step": f.get(2, [0])[0]}
    if 3 in f:
        ev["file_version"] = f[3][0].decode()
    if 7 in f:
        ev["session_log"] = fields(f[7][0]).get(1, [0])[0]
    if 5 in f:
        ev["values"] = []
        for v in fields(f[5][0]).get(1, []):
            vf = fields(v)
            value = {"tag": vf[1][0].decode()}
            if 2 in vf:
                value["simple_value"] = struct.unpack("<f", vf[2][0])[0]
            if 8 in vf:
                t = fields(vf[8][0])
                assert t[1] == [7], "text tensor is not DT_STRING"
                value["text"] = t[8][0].decode()
                value["plugin"] = fields(fields(vf[9][0])[1][0])[1][0].decode()
            ev["values"].append(value)
    return ev


def event_files(d):
    files = sorted(glob.glob(os.path.join(d, "*tfevents*")))
    assert files, f"{d}: no event files"
    return files


def independent_view(d):
    """{tag: [(step, value)]} and the settings texts, after the START purges."""
    scalars, texts = {}, []
    for path in event_files(d):
        evs = [decode_event(r) for r in records(path)]
        assert evs[0].get("file_version") == "brain.Event:2", f"{path}: first event is not the file version"
        assert evs[1].get("session_log") == 1, f"{path}: second event is not a SessionLog START"
        assert all(e["wall_time"] > 1.6e9 for e in evs), f"{path}: wall_time is not a Unix time"
        for ev in evs:
            if ev.get("session_log") == 1:  # TensorBoard's rule: points at or past START go
                scalars = {t: [p for p in pts if p[0] < ev["step"]] for t, pts in scalars.items()}
                texts = [x for x in texts if x[0] < ev["step"]]
            for v in ev.get("values", []):
                if "text" in v:
                    assert v["plugin"] == "text", v
                    texts.append((ev["step"], v["text"]))
                else:
                    scalars.setdefault(v["tag"], []).append((ev["step"], v["simple_value"]))
    return {t: p for t, p in scalars.items() if p}, texts


def tensorboard_view(d):
    """The same through TensorBoard's EventAccumulator, or None where it cannot be imported."""
    extra = os.environ.get("TENSORBOARD_PYTHONPATH")
    if extra:
        sys.path.insert(0, extra)
    try:
        from tensorboard.backend.event_processing import event_accumulator as ea
    except Exception as exc:  # not installed, or its dependencies missing
        print(f"TensorBoard's reader: skipped (cannot import tensorboard: {exc})")
        return None
    acc = ea.EventAccumulator(d, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    scalars = {t: [(s.step, s.value) for s in acc.Scalars(t)] for t in tags["scalars"]}
    texts = [(t.step, t.tensor_proto.string_val[0].decode()) for t in acc.Tensors("settings")]
    return scalars, texts


def expected(metrics_path):
    want, run = {}, None
    for line in open(metrics_path):
        r = json.loads(line)
        run = run or r["run"]
        g = r["global_step"]
        if r["kind"] == "step":
            for tag, key in (("train/loss", "loss"), ("train/learning_rate", "lr"), ("train/images_per_s", "images_per_s")):
                want.setdefault(tag, []).append((g, r[key]))
        elif r["kind"] == "epoch":
            for tag, key in (("epoch/epoch", "epoch"), ("epoch/train_loss", "train_loss"),
                             ("epoch/train_accuracy", "train_accuracy"), ("epoch/test_accuracy", "test_accuracy"),
                             ("epoch/images_per_s", "images_per_s")):
                if r[key] is not None:
                    want.setdefault(tag, []).append((g, r[key]))
        elif r["kind"] == "final":
            want.setdefault("final/test_accuracy", []).append((g, r["test_accuracy"]))
    return want, run


def compare(name, view, want, run):
    scalars, texts = view
    assert sorted(scalars) == sorted(want), f"{name}: tags {sorted(scalars)}, metrics file has {sorted(want)}"
    for tag, pts in want.items():
        got = scalars[tag]
        assert [s for s, _ in got] == [s for s, _ in pts], f"{name}: {tag} at steps {[s for s, _ in got]}, metrics file {[s for s, _ in pts]}"
        for (s, v), (_, w) in zip(got, pts):
            assert math.isclose(v, w, rel_tol=1e-7, abs_tol=1e-30), f"{name}: {tag} at step {s}: {v}, metrics file {w}"
    assert texts, f"{name}: no settings text"
    for _, text in texts:
        assert f"run `{run}`" in text, f"{name}: settings text does not name run {run}: {text[:200]}"
        config = json.loads(text.split("\n\n", 1)[1].strip())
        assert "model" in config and "seed" in config, f"{name}: settings text holds no config: {config}"
    print(f"{name}: {sum(len(p) for p in want.values())} points in {len(want)} tags and {len(texts)} settings "
          "text(s) equal the metrics file")


def inject(d, step):
    """Appends an Event with train/loss = 9 at `step` to the newest event file (hand-encoded)."""
    def key(num, wire):
        return bytes([num << 3 | wire])

    def ld(num, payload):
        return key(num, 2) + bytes([len(payload)]) + payload

    def var(v):
        out = b""
        while True:
            out += bytes([(v & 0x7F) | (0x80 if v > 0x7F else 0)])
            v >>= 7
            if not v:
                return out

    value = ld(1, b"train/loss") + key(2, 5) + struct.pack("<f", 9.0)
    body = key(1, 1) + struct.pack("<d", time.time()) + key(2, 0) + var(step) + ld(5, ld(1, value))
    head = struct.pack("<Q", len(body))
    with open(event_files(d)[-1], "ab") as f:
        f.write(head + struct.pack("<I", masked(head)) + body + struct.pack("<I", masked(body)))


def main():
    assert crc32c(b"123456789") == 0xE3069283, "CRC-32C test vector"
    if sys.argv[1] == "--inject":
        inject(sys.argv[2], int(sys.argv[3]))
        return
    d, metrics_path = sys.argv[1], sys.argv[2]
    want, run = expected(metrics_path)
    compare("independent decoder", independent_view(d), want, run)
    view = tensorboard_view(d)
    if view is not None:
        compare("TensorBoard's EventAccumulator", view, want, run)


if __name__ == "__main__":
    try:
        main()
    except AssertionError as exc:
        print(f"check_tensorboard.py: {exc}")
        sys.exit(1)
