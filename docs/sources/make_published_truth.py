"""Writes adloader/sim/truths/published-steps.json from docs/sources/gpu-measurements.md.
Run from the repository root: python3 docs/sources/make_published_truth.py (it reproduces
the committed file byte for byte; a test checks that)."""
import json
import math
import re
from pathlib import Path

SRC = "docs/sources/gpu-measurements.md"
lines = Path(SRC).read_text().splitlines()


def at(n, must):
    assert must in lines[n - 1], (n, must, lines[n - 1][:120])
    return f"{SRC}:{n}"


anchors = [  # (published model, flops_g, params_m, batch, ms/img, img/s, framework, line, must)
    ("ResNet-18", 3.628146688, 11.689512, 128, 1.34, "PyTorch, ImageNet (CGN, EVGA RTX 2080 Ti)",
     93, "1000/1.34 = 746.3"),
    ("ResNet-50", 8.178368512, 25.557032, 64, 3.78, "PyTorch, ImageNet (CGN, EVGA RTX 2080 Ti)",
     70, "1000/3.78 = 264.6"),
    ("ResNet-101", 15.60281088, 44.54916, 64, 5.92, "PyTorch, ImageNet (CGN, EVGA RTX 2080 Ti)",
     111, "1000/5.92 = 168.9"),
    ("ResNet-152", 23.027253248, 60.192808, 32, 8.78, "PyTorch, ImageNet (CGN, EVGA RTX 2080 Ti)",
     110, "1000/8.78 = 113.9"),
    ("VGG16", 30.694285312, 138.357544, 56, 1000 / 190,
     "TensorFlow tf_cnn_benchmarks, synthetic data (Lambda, RTX 2080 Ti); no PyTorch 2080 Ti "
     "figure for VGG16 in the sources", 113, "| 56 | 190 |"),
]
anchor_rows = [{
    "model": m, "flops_g": f, "params_m": p, "batch": b, "ms_per_image": round(ms, 6),
    "images_per_s": round(1000 / ms, 3), "measured_with": fw, "source": at(n, must),
} for m, f, p, b, ms, fw, n, must in anchors]

# batch curve: Gavel V100 ResNet-50 ImageNet (PyTorch) solo steps/s x batch, 16..128;
# 256 from CGN's TITAN RTX (the 2080 Ti's TU102 chip) ResNet-50 128 -> 256 ratio
gavel = {16: (233, "11.396129065315943"), 32: (234, "7.787264918596293"),
         64: (235, "4.394774823323071"), 128: (236, "2.4967655780898292")}
curve = []
for b, (n, steps) in gavel.items():
    curve.append({"batch": b, "images_per_s": round(float(steps) * b, 4),
                  "source": at(n, steps) + " (Gavel V100 ResNet-50 ImageNet, steps/s x batch)"})
r256 = (1000 / 3.41) / (1000 / 3.42)
curve.append({"batch": 256, "images_per_s": round(curve[-1]["images_per_s"] * r256, 4),
              "source": at(85, "256 → 3.41 ms/img") + " (CGN TITAN RTX ResNet-50: 3.42 ms/img at "
              "128, 3.41 at 256; applied as the ratio 256/128 to the V100 batch-128 figure)"})

# multi-GPU: ring all-reduce overhead per M parameters, from NVIDIA's ResNet-50 V100 FP32
one, eight, batch = 367.0, 2855.0 / 8, 112
overhead_ms = (batch / eight - batch / one) * 1000
k = overhead_ms / (2 * 7 / 8 * 25.557032)

# co-location: Gavel V100 pairs
klass = {"ResNet-18": "light", "ResNet-50": "heavy"}
pairs, excluded = [], []
pat = re.compile(r"^\| v100 \| (ResNet-\d+) \(batch size (\d+)\) \| (ResNet-\d+) \(batch size (\d+)\) "  # noqa: E501
                 r"\| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|(.*)$")
for n, line in enumerate(lines, 1):
    if n < 256:
        continue
    mt = pat.match(line)
    if not mt:
        continue
    ma, ba, mb, bb, sa, sb, ta, tb, rest = mt.groups()
    row = {"a": klass[ma], "batch_a": int(ba), "b": klass[mb], "batch_b": int(bb),
           "source": f"{SRC}:{n}"}
    if float(ta) == 0.0:
        excluded.append({**row, "why": "pair failed (0.0, 0.0; out of memory, the file does not say)"})  # noqa: E501
    elif "identical to solo" in rest:
        excluded.append({**row, "why": "identical to the solo values to all digits: filled in, not "
                                        "measured (the source's caveat 1)"})
    else:
        pairs.append({**row, "x_a": round(float(ta) / float(sa), 4),
                      "x_b": round(float(tb) / float(sb), 4)})

truth = {
    "name": "published",
    "description": (
        "Step times and GPU co-location of the zoo's models from published measurements "
        "(docs/sources/gpu-measurements.md, every figure cited by line), for the GPU of the "
        "paper profile's testbed. Loading is not here: it stays the profile's L(D)."),
    "gpu": "GeForce RTX 2080 Ti",
    "gpu_choice": (
        "adloader/device/profiles/paper.json and A-Dloader §IV-A: 4x GeForce RTX 2080 Ti. Published "  # noqa: E501
        "single-GPU 2080 Ti figures exist for ResNet-18/50/101/152 (CGN, PyTorch) and VGG16 "
        "(Lambda, TensorFlow), so those anchor the steps. No batch sweep and no co-location pair "
        "is published for a 2080 Ti: the batch curve is the V100's (Gavel, PyTorch ImageNet "
        "ResNet-50; 256 from the TITAN RTX, same TU102 chip), the pairs are the V100's (Gavel measured V100, "  # noqa: E501
        "P100 and K80; the V100 is the nearest to the 2080 Ti by the published FP32 ResNet-50 "
        "rates: V100 367 img/s (" + at(40, "367 img/s") + "), 2080 Ti 264.6 (" + at(70, "264.6")
        + ") and 321 (" + at(65, "321") + "), P100 219 (" + at(71, "219") + "), K80 51.9 ("
        + at(72, "51.9") + "))."),
    "step_time": {
        "form": (
            "step(m, b, n) = b * ms_img(m, b) / 1000 + comm(M_m, n) seconds, b the per-GPU batch. "
            "ms_img(m, b) = ms_per_image(a) * rel(batch(a)) / rel(b) * f_m / f_a, where a is the "
            "anchor of m's family (ResNet, VGG) nearest to zoo model m in |ln(f_m / f_a)| (f: forward GFLOPs per sample, 2 per "  # noqa: E501
            "multiply-add, FlopCounterMode) and rel(b) the batch curve's images/s, "
            "piecewise-linear in log2(b) between its batches and flat outside them. "
            "Not eq. 6: images/s saturates with batch, no parameter terms on one GPU."),
        "anchors": anchor_rows,
        "anchor_flops": ("forward FLOPs per 224x224 sample counted here with torch's "
                         "FlopCounterMode on plain-nn ResNets of torchvision's layouts "
                         "(ResNet-18 is the zoo's Resnet18; VGG16 the zoo's VGG16 convolutions, "
                         "params of the original 138 M net, informative only)"),
        "batch_curve": curve,
        "communication": {
            "form": "comm(M, n) = ms_per_mparam * M * 2 (n - 1) / n / 1000 s (ring all-reduce; 0 on one GPU)",  # noqa: E501
            "ms_per_mparam": round(k, 6),
            "derivation": (
                f"NVIDIA ResNet-50 v1.5 PyTorch V100 16GB FP32 at 112 per GPU: 1 GPU 367 img/s, "
                f"8 GPUs 2855 img/s -> step {batch / one * 1000:.2f} ms alone, "
                f"{batch / eight * 1000:.2f} ms on 8 = {overhead_ms:.3f} ms over "
                "25.557 M params x 2*7/8"),
            "source": [at(40, "367 img/s"), at(42, "2855 img/s")],
            "caveat": "a DGX-1 (NVLink) figure; the testbed's 2080 Tis talk over PCIe, so "
                      "multi-GPU steps are likely too short here",
        },
    },
    "colocation": {
        "form": (
            "Two jobs on one GPU: each job's rate co-located / its rate alone is the published "
            "pair's x. Applied by model class (light: nearer in forward FLOPs per sample to "
            "Gavel's ResNet-18 on CIFAR-10, heavy: to its ResNet-50 on ImageNet) and per-GPU "
            "batch (the pair rows nearest in sum |log2(batch / row batch)|, valid rows only, "
            "ties averaged). In the fluid simulation a co-located job's GPU time per iteration is "
            "its step x 0.5 / x and it never runs faster than alone: two GPU-bound jobs sharing "
            "a GPU then run at exactly x of their solo rate each; x = 0.5 is perfect "
            "time-slicing. A job with several partners takes the smallest x."),
        "gpu": "V100 (Gavel scheduler/simulation_throughputs.json)",
        "classes": {
            "light": {"published": "ResNet-18 (CIFAR-10, 32x32)", "flops_g": 1.11084544},
            "heavy": {"published": "ResNet-50 (ImageNet, 224x224)", "flops_g": 8.178368512},
        },
        "class_source": at(256, "Gavel co-located pairs"),
        "pairs": pairs,
        "excluded": excluded,
    },
}
features = __import__("json").loads(Path("models/features.json").read_text())
zoo = {}
for name, feat in features.items():
    f = feat["flops"] / 1e9
    family = "vgg" if "VGG" in name else "resnet"
    same = [r for r in anchor_rows if ("VGG" in r["model"]) == (family == "vgg")]
    a = min(same, key=lambda r: abs(math.log(f / r["flops_g"])))
    light = abs(math.log(f / 1.11084544)) <= abs(math.log(f / 8.178368512))
    zoo[name] = {"flops_g": round(f, 6), "params_m": round(feat["params"] / 1e6, 6),
                 "anchor": a["model"], "flops_ratio": round(f / a["flops_g"], 6),
                 "class": "light" if light else "heavy"}
truth["zoo"] = zoo
truth["zoo_note"] = ("each zoo model's anchor, FLOPs ratio and co-location class as the form "
                     "above gives them (models/features.json); recomputed at load, and a test "
                     "checks they agree with this table")
out = Path("adloader/sim/truths/published-steps.json")
out.write_text(json.dumps(truth, indent=1, ensure_ascii=False) + "\n")
print(out, len(pairs), "pairs", len(excluded), "excluded; k =", k, "overhead", overhead_ms)
