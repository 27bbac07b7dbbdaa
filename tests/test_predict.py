#!/usr/bin/env python3
"""cifar10-predict and data/image.c against PIL and PyTorch (Debian's python3-pil, -numpy,
-torch).

    test_predict.py BUILD_DIR

Pictures are made here by PIL from known CIFAR-10-format records (tests/make_synthetic) in the
forms real files take: RGB, RGBA, LA, grayscale and palette (with transparency) PNG, 16-bit RGB
and grayscale PNG (written by hand: PIL cannot write 16-bit RGB), baseline, progressive,
grayscale and CMYK JPEG, and EXIF orientations 2 to 8 (JPEG APP1 and PNG eXIf), at sizes
above, below and across 32 pixels, two of them 10,000 and 20,000 times as long as wide (and one interlaced
PNG, written by libpng: tests/fuzz/corpus/image). For each:
  - decoding (tests/image_dump's .rgb) equals PIL's ImageOps.exif_transpose(Image.open(f))
    .convert("RGB") exactly (16-bit grayscale: the high byte; PIL clips it instead);
  - the 32x32 result (.cifar) equals torchvision's Resize(32) + CenterCrop(32) on that picture
    exactly: PIL's resize(BILINEAR) to (32, int(32 * long / short)) and the crop at
    int(round((size - 32) / 2)), as torchvision computes them (tolerance 0 grey levels);
  - cifar10-predict --json's probabilities equal PyTorch's float64 softmax of the model (loaded
    strictly from the file into tests/torch_reference.py's network) on that 32x32 record,
    normalised with the file's metadata, within 1e-5 absolute; with --tta 1 the mean of the
    picture's and its mirror image's logits;
and bad files (truncated PNG and JPEG, random bytes, an empty file, a header claiming more
pixels than --max-pixels) each get one stderr line naming the file and exit 1 while the good
pictures are still classified. Ends with "predict: N passed, M failed".
"""
import io
import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import torch
from PIL import Image, ImageOps

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tally import Tally  # noqa: E402
from torch_reference import NETWORKS, load_safetensors  # noqa: E402

tally = Tally("predict")
check = tally.check


def chunk(kind, data):
    """A PNG chunk: length, type, data, CRC-32."""
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png16(path, arr):
    """A 16-bit PNG (grayscale [h][w] or RGB [h][w][3] uint16) written by hand."""
    h, w = arr.shape[:2]
    color = 2 if arr.ndim == 3 else 0
    raw = b"".join(b"\0" + arr[y].astype(">u2").tobytes() for y in range(h))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, color, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def exif(orientation):
    e = Image.Exif()
    e[0x0112] = orientation
    return e.tobytes()


def make_pictures(d, records):
    """{name: (path, expected RGB array or None for PIL's own decoding)}"""
    rgb = [r[1:].reshape(3, 32, 32).transpose(1, 2, 0) for r in records]
    base = [Image.fromarray(a) for a in rgb]
    pics = {}

    def save(name, im, **kw):
        path = os.path.join(d, name)
        im.save(path, **kw)
        pics[name] = (path, None)
    save("rgb-96x64.png", base[0].resize((96, 64), Image.BICUBIC))
    save("rgb-32x32.png", base[1])
    save("rgb-20x27.png", base[2].resize((20, 27), Image.BICUBIC))  # upscaled
    save("rgb-45x32.png", base[3].resize((45, 32), Image.BICUBIC))  # crop offset 6.5 -> 6 (half to even)
    save("rgb-33x99.png", base[4].resize((33, 99), Image.BICUBIC))
    rgba = base[5].resize((64, 64)).convert("RGBA")
    rgba.putalpha(Image.fromarray((np.arange(64 * 64) % 256).astype(np.uint8).reshape(64, 64)))
    save("rgba.png", rgba)
    save("la.png", base[6].resize((50, 70)).convert("LA"))
    save("gray.png", base[7].resize((40, 40)).convert("L"))
    pal = base[8].resize((48, 40)).convert("P", palette=Image.ADAPTIVE, colors=37)
    save("palette-trns.png", pal, transparency=5)
    save("baseline.jpg", base[9].resize((100, 75), Image.BICUBIC), quality=90)
    save("progressive.jpg", base[10].resize((80, 120), Image.BICUBIC), quality=85, progressive=True)
    save("gray.jpg", base[11].resize((64, 48)).convert("L"), quality=90)
    save("cmyk.jpg", base[12].resize((70, 50)).convert("CMYK"), quality=95)
    save("exif6.jpg", base[13].resize((90, 60), Image.BICUBIC), quality=92, exif=exif(6))
    save("exif8.jpg", base[14].resize((60, 90), Image.BICUBIC), quality=92, exif=exif(8))
    save("exif3.png", base[15].resize((50, 40)), exif=exif(3))
    save("exif5.png", base[16].resize((36, 52)), exif=exif(5))
    save("exif2.png", base[19].resize((44, 34)), exif=exif(2))
    save("exif4.jpg", base[0].resize((40, 56), Image.BICUBIC), quality=92, exif=exif(4))
    save("exif7.jpg", base[1].resize((72, 40), Image.BICUBIC), quality=92, exif=exif(7))
    # Resize(32) makes these 32 x 640,000 and 320,000 x 32: the crop far from the origin
    save("tall-2x40000.png", base[2].resize((2, 40000), Image.BICUBIC))
    save("wide-30000x3.jpg", base[3].resize((30000, 3), Image.BICUBIC), quality=90)
    # interlaced (Adam7, palette with transparency): PIL cannot write one; libpng wrote this seed
    pics["interlaced.png"] = (os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz", "corpus", "image",
                                           "palette-interlaced.png"), None)
    big = np.kron(rgb[17].astype(np.uint16) * 257, np.ones((2, 3, 1), dtype=np.uint16))  # 64x96, 16-bit
    big[..., 0] += np.arange(96, dtype=np.uint16)[None, :]  # low bytes that must not matter
    png16(os.path.join(d, "rgb16.png"), big)
    pics["rgb16.png"] = (os.path.join(d, "rgb16.png"), None)
    g16 = (rgb[18][..., 1].astype(np.uint16) * 256 + 255)
    png16(os.path.join(d, "gray16.png"), g16)
    pics["gray16.png"] = (os.path.join(d, "gray16.png"), np.repeat((g16 >> 8).astype(np.uint8)[..., None], 3, axis=2))
    return pics


def pil_rgb(path):
    return np.asarray(ImageOps.exif_transpose(Image.open(path)).convert("RGB"))


def torchvision_32(arr):
    """Resize(32) + CenterCrop(32) as torchvision 0.13+ computes them on a PIL image."""
    im = Image.fromarray(arr)
    w, h = im.size
    short, long = (w, h) if w <= h else (h, w)
    new_long = int(32 * long / short)
    ow, oh = (32, new_long) if w <= h else (new_long, 32)
    if (ow, oh) != (w, h):
        im = im.resize((ow, oh), Image.BILINEAR)
    top, left = int(round((oh - 32) / 2.0)), int(round((ow - 32) / 2.0))
    return np.asarray(im.crop((left, top, left + 32, top + 32)))


def image_dump(build, path, out):
    r = subprocess.run([os.path.join(build, "tests", "image_dump"), path, out], capture_output=True, text=True)
    if r.returncode != 0:
        return None, None, r.stderr
    w, h = map(int, r.stdout.split())
    rgb = np.fromfile(out + ".rgb", dtype=np.uint8).reshape(h, w, 3)
    rec = np.fromfile(out + ".cifar", dtype=np.uint8).reshape(3, 32, 32).transpose(1, 2, 0)
    return rgb, rec, ""


def train_model(build, d):
    data = os.path.join(d, "data")
    subprocess.run([os.path.join(build, "tests", "make_synthetic"), data, "64", "20"], check=True, capture_output=True)
    model = os.path.join(d, "model.safetensors")
    r = subprocess.run([os.path.join(build, "cifar10-train"), "--model", "airbench94", "--batch-size", "32",
                        "--epochs", "2", "--whiten-images", "64", "--threads", "2", "--no-eval", "--tta", "0",
                        "--device", "cpu", "--model-file", model, data], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"test_predict.py: training the test model failed: {r.stderr[-500:]}")
    raw = open(os.path.join(data, "test_batch.bin"), "rb").read()
    records = [np.frombuffer(raw[i * 3073:(i + 1) * 3073], dtype=np.uint8) for i in range(20)]
    return model, records


def torch_probs(model_path, recs, tta):
    state, meta = load_safetensors(model_path)
    net = NETWORKS[meta["model"]]().double().eval()
    net.load_state_dict(state, strict=True)
    mean = torch.tensor(json.loads(meta["normalization_mean"]), dtype=torch.float64).view(3, 1, 1)
    std = torch.tensor(json.loads(meta["normalization_std"]), dtype=torch.float64).view(3, 1, 1)
    x = torch.from_numpy(np.stack(recs).transpose(0, 3, 1, 2).astype(np.float64)) / 255.0
    x = (x - mean) / std
    with torch.no_grad():
        z = net(x)
        if tta == 1:
            z = 0.5 * z + 0.5 * net(torch.flip(x, dims=[3]))
    return torch.softmax(z, dim=1).numpy()


def main():
    build = os.path.abspath(sys.argv[1])
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as d:
        model, records = train_model(build, d)
        pics = make_pictures(d, records)
        ours = {}
        for name, (path, expected) in pics.items():
            rgb, rec, err = image_dump(build, path, os.path.join(d, name + ".out"))
            if rgb is None:
                check(f"{name}: decodes", False, err)
                continue
            ref = expected if expected is not None else pil_rgb(path)
            check(f"{name}: decoded {rgb.shape[1]}x{rgb.shape[0]} == PIL's {ref.shape[1]}x{ref.shape[0]}",
                  rgb.shape == ref.shape and np.array_equal(rgb, ref),
                  f"max diff {np.abs(rgb.astype(int) - ref.astype(int)).max() if rgb.shape == ref.shape else 'shape'}")
            tv = torchvision_32(ref)
            diff = int(np.abs(rec.astype(int) - tv.astype(int)).max())
            check(f"{name}: 32x32 == torchvision's Resize(32) + CenterCrop(32) (max diff {diff})", diff == 0)
            ours[name] = (path, rec)

        # Resize(32) would make this 32 x 64,000,000 pixels (6.1 GB), of which the crop keeps 32
        # rows: ours computes only those, so 1 GiB of address space is plenty. (Taller than
        # libpng's default limit of 1,000,000 rows, which PIL does not have.)
        tall = os.path.join(d, "tall-1x2000000.png")
        Image.new("RGB", (1, 2000000), (77, 140, 200)).save(tall)
        limit = (1 << 30, 1 << 30)
        r = subprocess.run([os.path.join(build, "tests", "image_dump"), tall, tall + ".out"], capture_output=True,
                           text=True, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, limit))
        rec = np.fromfile(tall + ".out.cifar", dtype=np.uint8).reshape(3, 32 * 32) if r.returncode == 0 else None
        check("1 x 2,000,000 picture: its colour in every pixel of the 32x32, within 1 GiB",
              rec is not None and all((rec[c] == v).all() for c, v in enumerate((77, 140, 200))), r.stderr)

        names = sorted(ours)
        for tta in (0, 1):
            r = subprocess.run([os.path.join(build, "cifar10-predict"), "--json", "--tta", str(tta), "--top", "3",
                                "--model-file", model] + [ours[n][0] for n in names], capture_output=True, text=True)
            check(f"predict --tta {tta}: exit 0 ({r.stderr.strip()})", r.returncode == 0)
            got = json.loads(r.stdout)["images"]
            want = torch_probs(model, [ours[n][1] for n in names], tta)
            classes = list(got[0]["probabilities"]) if got else []
            worst = max(abs(g["probabilities"][c] - want[i][j]) for i, g in enumerate(got) for j, c in enumerate(classes))
            check(f"predict --tta {tta}: {len(got)} pictures' probabilities == PyTorch float64 (max abs diff {worst:.2g})",
                  len(got) == len(names) and worst <= 1e-5)
            check(f"predict --tta {tta}: files in order, top 3 sorted by probability",
                  [g["file"] for g in got] == [ours[n][0] for n in names] and
                  all([t["class"] for t in g["top"]] == sorted(classes, key=lambda c: -g["probabilities"][c])[:3] for g in got))

        # Text output: one line per picture naming it, top classes with percentages.
        r = subprocess.run([os.path.join(build, "cifar10-predict"), "--model-file", model, ours[names[0]][0]],
                           capture_output=True, text=True)
        check("text output: FILE: class P %, ...", r.returncode == 0 and r.stdout.startswith(ours[names[0]][0] + ": ") and
              r.stdout.count(" %") == 3, r.stdout)

        bad = {}
        good_png = open(ours["rgb-96x64.png"][0], "rb").read()
        good_jpg = open(ours["baseline.jpg"][0], "rb").read()
        for name, data in (("truncated.png", good_png[:len(good_png) // 2]), ("truncated.jpg", good_jpg[:200]),
                           ("random.png", bytes(np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8))),
                           ("empty.jpg", b"")):
            bad[name] = os.path.join(d, name)
            open(bad[name], "wb").write(data)
        # a small file whose header claims 30000 x 30000 pixels (900 M, over --max-pixels 1000000)
        bomb = os.path.join(d, "bomb.png")
        open(bomb, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0)) +
                               chunk(b"IDAT", zlib.compress(bytes(90001 * 100))) + chunk(b"IEND", b""))
        bad["bomb.png"] = bomb
        args = [ours["gray.png"][0], *bad.values(), ours["cmyk.jpg"][0]]
        r = subprocess.run([os.path.join(build, "cifar10-predict"), "--json", "--max-pixels", "1000000",
                            "--model-file", model] + args, capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        check(f"bad files: exit 1 ({r.returncode})", r.returncode == 1)
        check(f"bad files: one stderr line each, naming the file ({lines})",
              len(lines) == len(bad) and all(line.startswith(f"cifar10-predict: {p}: ") for line, p in zip(lines, bad.values())))
        check("bomb refused from its header", any("30000x30000 pixels is more than the limit of 1000000" in x for x in lines), str(lines))
        check("truncated PNG named as such", any("truncated.png: not a valid PNG file" in x for x in lines), str(lines))
        check("truncated JPEG named as such", any("truncated.jpg: not a valid JPEG file" in x for x in lines), str(lines))
        got = json.loads(r.stdout)["images"] if r.stdout else []
        check("the good pictures are still classified",
              len(got) == len(args) and "probabilities" in got[0] and "probabilities" in got[-1] and
              all("error" in g for g in got[1:-1]), r.stdout[:300])
        r = subprocess.run([os.path.join(build, "cifar10-predict"), "--top", "11", "--model-file", model, bomb],
                           capture_output=True, text=True)
        check("--top 11: usage error, exit 2", r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr)
    return tally.report()


if __name__ == "__main__":
    sys.exit(main())
