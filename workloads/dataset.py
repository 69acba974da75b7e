"""A synthetic image dataset over real JPEG files, for measuring the loading rate λ.

Each sample is read from disk, decoded with Pillow and augmented the way an ImageNet
pipeline does (random resized crop, random horizontal flip, normalisation), so a
data-loader worker spends the CPU time a real one would (A-Dloader §III-B, eq. 7:
t_read + t_pre per sample).
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from adloader.errors import InputError
from adloader.host.atomic import atomic_path
from adloader.workloads.emulated_gpu import virtual_core

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
JPEG_QUALITY = 90


def image_path(root: str | Path, index: int) -> Path:
    return Path(root) / f"img_{index:05d}.jpg"


def _render(index: int, image_size: tuple[int, int], seed: int) -> Image.Image:
    """Smooth gradients, a wave and noise: decodes like a photograph, not like a flat fill."""
    width, height = image_size
    rng = np.random.default_rng([seed, index])
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    xx /= max(width - 1, 1)
    yy /= max(height - 1, 1)
    theta = rng.uniform(0, math.pi)
    wave = np.sin(rng.uniform(4, 24) * (xx * math.cos(theta) + yy * math.sin(theta)))
    channels = []
    for _ in range(3):
        base, gx, gy, amp = rng.uniform(40, 200), *rng.uniform(-80, 80, size=2), rng.uniform(10, 50)
        channels.append(base + gx * xx + gy * yy + amp * wave)
    pixels = np.stack(channels, axis=-1) + rng.normal(0.0, 12.0, size=(height, width, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), mode="RGB")


def ensure_images(
    root: str | Path, count: int, image_size: tuple[int, int] = (256, 256), seed: int = 0
) -> list[Path]:
    """Write ``count`` JPEG files (quality 90) into ``root`` once; existing files are kept."""
    if count < 1:
        raise InputError(f"images: need at least 1 image, got {count}")
    if min(image_size) < 1:
        raise InputError(f"image size must be positive, got {image_size}")
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{root}: cannot create the image folder: {exc.strerror}") from None
    paths = []
    for index in range(count):
        path = image_path(root, index)
        if not path.exists():
            with atomic_path(path) as tmp:
                _render(index, image_size, seed).save(tmp, format="JPEG", quality=JPEG_QUALITY)
        paths.append(path)
    return paths


def random_resized_crop(
    width: int, height: int, scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
) -> tuple[int, int, int, int]:
    """A crop box (left, top, right, bottom) of random area and aspect, as ImageNet uses."""
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * random.uniform(*scale)
        aspect = math.exp(random.uniform(*log_ratio))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            left = random.randint(0, width - w)
            top = random.randint(0, height - h)
            return left, top, left + w, top + h
    # Fallback: the largest centred box within the aspect bounds.
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, round(width / ratio[0])
    elif in_ratio > ratio[1]:
        w, h = round(height * ratio[1]), height
    else:
        w, h = width, height
    left, top = (width - w) // 2, (height - h) // 2
    return left, top, left + w, top + h


class SyntheticJPEGDataset(Dataset):
    """``size`` samples cycling over ``images`` JPEG files in ``root``: (CHW float32, label).

    Randomness of the augmentation comes from Python's ``random``, which torch's DataLoader
    seeds differently in each worker. The label of sample i depends only on (seed, i mod images).
    """

    def __init__(
        self,
        root: str | Path,
        size: int,
        image_size: tuple[int, int] = (256, 256),
        num_classes: int = 1000,
        seed: int = 0,
        crop: int = 224,
        images: int = 256,
    ) -> None:
        if size < 1:
            raise InputError(f"dataset size must be at least 1, got {size}")
        if num_classes < 1:
            raise InputError(f"num_classes must be at least 1, got {num_classes}")
        if crop < 1:
            raise InputError(f"crop must be at least 1 pixel, got {crop}")
        self.size = size
        self.crop = crop
        self.num_classes = num_classes
        self.seed = seed
        self.files = [str(p) for p in ensure_images(root, images, image_size, seed)]

    def __len__(self) -> int:
        return self.size

    def label(self, index: int) -> int:
        file_index = index % len(self.files)
        mixed = (file_index * 0x9E3779B1 + self.seed * 0x85EBCA77 + 0x165667B1) % (1 << 32)
        mixed = (mixed ^ (mixed >> 15)) * 0x2C1B3C6D % (1 << 32)
        return int(mixed % self.num_classes)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if not 0 <= index < self.size:
            raise IndexError(f"sample {index} out of range 0..{self.size - 1}")
        with virtual_core():  # on an emulated GPU node: a core of its own (1/k of one here)
            return self._load(index)

    def _load(self, index: int) -> tuple[torch.Tensor, int]:
        with Image.open(self.files[index % len(self.files)]) as img:
            img = img.convert("RGB")
        box = random_resized_crop(*img.size)
        img = img.resize((self.crop, self.crop), Image.Resampling.BILINEAR, box=box)
        if random.random() < 0.5:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        pixels = np.asarray(img, dtype=np.float32) / 255.0
        pixels = (pixels - MEAN) / STD
        return torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1))), self.label(index)
