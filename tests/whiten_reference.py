#!/usr/bin/env python3
"""airbench's whitening filter in PyTorch float64, against ours (tests/test_whiten.c runs this).

usage: whiten_reference.py DIR N EPS
DIR/x.f32: the model's input images [N][3][32][32] (float32); DIR/w.f32: our filter [24][3][2][2].
Computes the filter as legacy/airbench94.py does (get_patches, get_whitening_parameters,
init_whitening_conv), in float64, and compares up to each eigenvector's sign (eigh's sign is
arbitrary; a flip swaps filter i with its negation 12 + i). Exit 1 when the largest difference
exceeds 1e-5 of the largest filter value."""
import os
import sys

import numpy as np
import torch


def main():
    d, n, eps = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    x = torch.from_numpy(np.fromfile(os.path.join(d, "x.f32"), dtype=np.float32).reshape(n, 3, 32, 32)).double()
    ours = torch.from_numpy(np.fromfile(os.path.join(d, "w.f32"), dtype=np.float32).reshape(24, 3, 2, 2)).double()
    c, h, w = 3, 2, 2
    patches = x.unfold(2, h, 1).unfold(3, w, 1).transpose(1, 3).reshape(-1, c, h, w)
    flat = patches.reshape(len(patches), -1)
    cov = flat.T @ flat / len(flat)
    eigenvalues, eigenvectors = torch.linalg.eigh(cov, UPLO="U")
    eigenvalues = eigenvalues.flip(0).view(-1, 1, 1, 1)
    eigenvectors = eigenvectors.T.reshape(c * h * w, c, h, w).flip(0)
    scaled = eigenvectors / torch.sqrt(eigenvalues + eps)
    ref = torch.cat((scaled, -scaled))
    sign = torch.sign((ours[:12] * ref[:12]).sum(dim=(1, 2, 3))).view(-1, 1, 1, 1)
    err = float((ours - torch.cat((sign, sign)) * ref).abs().max() / ref.abs().max())
    gaps = eigenvalues.flatten().diff().abs().min().item()
    print(f"whiten_reference: largest difference from airbench's filter (PyTorch float64) {err:.3g} of the largest "
          f"value; eigenvalues {eigenvalues.flatten()[0].item():.3g} .. {eigenvalues.flatten()[-1].item():.3g}, "
          f"smallest gap {gaps:.3g}")
    return 0 if err <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
