"""ds's decoder against Pillow's Image.open(f).convert("RGB"), layout by layout.

The rule (libcommon/image.h): every file Pillow opens and converts to RGB, ds decodes to the
same pixels, exactly; every file Pillow refuses, ds rejects with a reason. The matrix:

  PNG   colour types 0 / 2 / 3 / 4 / 6 x every legal bit depth x with and without tRNS x
        Adam7 or not, plus gAMA / cHRM / sRGB / iCCP / sBIT / bKGD chunks (Pillow ignores
        them on convert, so must we), split and empty IDATs, a palette shorter than the
        indices need, bad CRCs. Written byte by byte here (zlib + struct), since Pillow
        writes few of these layouts.
  JPEG  baseline, progressive, arithmetic coding, restart markers, 4:4:4 / 4:2:2 / 4:2:0 /
        4:4:0 / 4:1:1, grayscale, RGB (Adobe transform 0), CMYK with and without the Adobe
        marker, YCCK, EXIF orientation, an ICC profile, junk around EOI, 12-bit (refused by
        both). Written by Pillow, by cjpeg / jpegtran (Debian's libjpeg-turbo-progs, which
        `make deps` installs) and by TurboJPEG through ctypes (YCCK, which neither of the
        others writes). Each file's header is checked to be the layout its name says.

Both sides use libjpeg-turbo with the same settings (islow DCT, fancy upsampling), so JPEGs
are compared exactly too: the tolerance is 0 everywhere.

Then the end to end: dspack over a folder of all these files packs every file Pillow reads
(pixels equal to Pillow's convert + resize, exactly, as every file here decodes at full
size) and lists in rejected.txt, with a reason, exactly those Pillow cannot read.
"""
import ctypes
import ctypes.util
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import warnings
import zlib

import h5py
import numpy as np
from PIL import Image
import torchvision.transforms as T

from reflib import BIN, BUILD, report, status  # noqa: E402

DSPACK = os.path.join(BIN, "dspack")
DRIVER = os.path.join(BUILD, "drivers", "image_resize")


# ---- PNG, byte by byte ----

def chunk(kind, data, crc=None):
    c = zlib.crc32(kind + data) if crc is None else crc
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", c & 0xFFFFFFFF)


CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def pack_row(samples, depth):
    """One scanline's samples (a 1-D array) packed big-endian at `depth` bits."""
    if depth == 16:
        return samples.astype(">u2").tobytes()
    if depth == 8:
        return samples.astype(np.uint8).tobytes()
    per = 8 // depth
    pad = (-len(samples)) % per
    s = np.concatenate([samples, np.zeros(pad, samples.dtype)]).reshape(-1, per).astype(np.uint16)
    shifts = np.arange(per - 1, -1, -1) * depth
    return (s << shifts).sum(1).astype(np.uint8).tobytes()


def filtered(raw_rows, bpp):
    """Each row with a filter byte; the five PNG filters in turn, so the decoder undoes all."""
    out, prev = [], None
    for y, row in enumerate(raw_rows):
        r = np.frombuffer(row, np.uint8).astype(np.int32)
        p = np.zeros_like(r) if prev is None else prev
        f = y % 5
        if f == 0:
            enc = r
        elif f == 1:  # Sub
            enc = r - np.concatenate([np.zeros(bpp, np.int32), r[:-bpp]]) if len(r) > bpp else r.copy()
        elif f == 2:  # Up
            enc = r - p
        else:
            a = np.concatenate([np.zeros(bpp, np.int32), r])
            enc = np.empty_like(r)
            for i in range(len(r)):
                left, up, ul = a[i], p[i], (p[i - bpp] if i >= bpp else 0)
                if f == 3:  # Average
                    pred = (left + up) // 2
                else:  # Paeth
                    pa, pb, pc = abs(up - ul), abs(left - ul), abs(left + up - 2 * ul)
                    pred = left if pa <= pb and pa <= pc else up if pb <= pc else ul
                enc[i] = r[i] - pred
        out.append(bytes([f]) + (enc & 255).astype(np.uint8).tobytes())
        prev = r
    return b"".join(out)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def png_bytes(samples, color, depth, interlace=0, palette=None, trns=None, extra=b"", idat_split=1,
              bad_idat_crc=False, empty_idat=False):
    """samples: [h, w, channels] integers in range for `depth`."""
    h, w, ch = samples.shape
    bpp = max(1, ch * depth // 8)
    if interlace:
        data = b""
        for x0, y0, dx, dy in ADAM7:
            sub = samples[y0::dy, x0::dx]
            if sub.shape[0] and sub.shape[1]:
                data += filtered([pack_row(r.reshape(-1), depth) for r in sub], bpp)
    else:
        data = filtered([pack_row(r.reshape(-1), depth) for r in samples], bpp)
    z = zlib.compress(data, 9)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, interlace))
    out += extra
    if palette is not None:
        out += chunk(b"PLTE", bytes(np.asarray(palette, np.uint8).reshape(-1)))
    if trns is not None:
        out += chunk(b"tRNS", trns)
    if empty_idat:
        out += chunk(b"IDAT", b"")
    step = -(-len(z) // idat_split)
    for i in range(0, len(z), step):
        part = z[i:i + step]
        out += chunk(b"IDAT", part, crc=(zlib.crc32(b"IDAT" + part) ^ 1) if bad_idat_crc else None)
    return out + chunk(b"IEND", b"")


def png_cases(rng):
    """(name, bytes) for the PNG matrix."""
    W, H = 13, 11  # odd sizes: packed rows end mid-byte, and every Adam7 pass is partial
    cases = []
    for color, depths in [(0, [1, 2, 4, 8, 16]), (2, [8, 16]), (3, [1, 2, 4, 8]), (4, [8, 16]), (6, [8, 16])]:
        for depth in depths:
            top = (1 << depth) - 1
            ch = CHANNELS[color]
            for interlace in (0, 1):
                for with_trns in ((False, True) if color in (0, 2, 3) else (False,)):
                    s = rng.integers(0, top + 1, (H, W, ch))
                    if color == 0 and depth == 16:
                        # Pillow's "I" mode clips on convert: values both sides of 255 matter.
                        s[: H // 2] = rng.integers(0, 256, (H // 2, W, 1))
                    palette = trns = None
                    if color == 3:
                        palette = rng.integers(0, 256, (1 << depth, 3))
                        if with_trns:
                            trns = bytes(rng.integers(0, 256, max(1, (1 << depth) // 2 + 1)).astype(np.uint8))
                    elif with_trns:
                        key = [int(v) for v in s[1, 2]]  # a colour that occurs: made transparent
                        trns = b"".join(struct.pack(">H", v) for v in key)
                    name = f"png_c{color}_d{depth}{'_adam7' if interlace else ''}{'_trns' if with_trns else ''}"
                    cases.append((name + ".png", png_bytes(s, color, depth, interlace, palette, trns)))
    # Gamma and colour chunks with values far from neutral: applying any of them would show.
    s8 = rng.integers(0, 256, (H, W, 3))
    icc = b"not a real profile " * 8
    chunks = {
        "gama": chunk(b"gAMA", struct.pack(">I", 25000)),
        "chrm": chunk(b"cHRM", struct.pack(">8I", 64000, 33000, 30000, 60000, 15000, 6000, 31270, 32900)),
        "srgb": chunk(b"sRGB", b"\x00"),
        "iccp": chunk(b"iCCP", b"junk\x00\x00" + zlib.compress(icc)),
        "sbit": chunk(b"sBIT", b"\x05\x06\x05"),
        "bkgd": chunk(b"bKGD", struct.pack(">3H", 0, 255, 0)),
        "text": chunk(b"tEXt", b"Comment\x00made by hand") + chunk(b"zTXt", b"Title\x00\x00" + zlib.compress(b"x" * 40)),
    }
    for k, c in chunks.items():
        cases.append((f"png_rgb_{k}.png", png_bytes(s8, 2, 8, extra=c)))
    allc = b"".join(chunks.values())
    cases.append(("png_rgba16_allchunks.png", png_bytes(rng.integers(0, 65536, (H, W, 4)), 6, 16, 1, extra=allc)))
    pal = rng.integers(0, 256, (16, 3))
    idx = rng.integers(0, 16, (H, W, 1))
    cases.append(("png_pal4_gama_trns_adam7.png",
                  png_bytes(idx, 3, 4, 1, pal, bytes([0, 128, 255, 7]), extra=chunks["gama"] + chunks["bkgd"][:0])))
    cases.append(("png_gray_gama_bkgd.png",
                  png_bytes(rng.integers(0, 256, (H, W, 1)), 0, 8, extra=chunks["gama"] + chunk(b"bKGD", b"\x00\x80"))))
    cases.append(("png_split_idat.png", png_bytes(s8, 2, 8, idat_split=7)))
    cases.append(("png_empty_idat.png", png_bytes(s8, 2, 8, empty_idat=True)))
    # A palette of 16 colours behind 8-bit indices that stay below 16 (legal).
    cases.append(("png_pal8_short_palette.png", png_bytes(idx, 3, 8, 0, pal)))
    # Indices past the end of the palette (an encoder bug seen in the wild).
    cases.append(("png_pal8_index_past_palette.png", png_bytes(idx, 3, 8, 0, pal[:5], trns=b"\x00\x40")))
    # A palette image without PLTE (illegal).
    cases.append(("png_pal8_no_plte.png", png_bytes(idx, 3, 8, 0, None)))
    # Bigger, Pillow-written, for the layouts Pillow itself produces.
    big = Image.fromarray(rng.integers(0, 256, (97, 131, 3)).astype(np.uint8))
    for mode in ("P", "RGBA", "LA", "L", "1"):
        buf = _save(big.convert(mode), "PNG", transparency=3 if mode in ("P", "L") else None)
        cases.append((f"png_pillow_{mode}{'_trns' if mode in ('P', 'L') else ''}.png", buf))
    # Animated PNGs: Pillow's open + convert gives the default image (IDAT); the frames in
    # fdAT chunks are unknown chunks to libpng, skipped.
    frames = [Image.fromarray(rng.integers(0, 256, (9, 14, 3)).astype(np.uint8)) for _ in range(3)]
    cases.append(("png_apng.png", _save(frames[0], "PNG", save_all=True, append_images=frames[1:], duration=50)))
    cases.append(("png_apng_default_image.png", _save(frames[0], "PNG", save_all=True, append_images=frames[1:],
                                                      duration=50, default_image=True)))
    cases.append(("png_pillow_I16.png", _save(Image.fromarray(rng.integers(0, 65536, (40, 30)).astype(np.uint16)), "PNG")))
    whole = png_bytes(s8, 2, 8)
    cases.append(("png_no_iend.png", whole[:-12]))
    cases.append(("png_trailing_bytes.png", whole + b"\0junk after IEND"))
    # Chunks Pillow skips: private ancillary and an unknown critical one before IDAT.
    cases.append(("png_private_chunk.png", png_bytes(s8, 2, 8, extra=chunk(b"prVt", b"\1\2\3"))))
    cases.append(("png_unknown_critical_chunk.png", png_bytes(s8, 2, 8, extra=chunk(b"CRIT", b"\1\2\3"))))
    # Refused by Pillow as well: a broken IDAT CRC is read by Pillow (it checks no IDAT CRC)...
    cases.append(("png_bad_idat_crc.png", png_bytes(s8, 2, 8, bad_idat_crc=True)))
    # ... a broken IHDR CRC is not; nor a truncated file; nor depth 16 palette (illegal).
    bad = bytearray(png_bytes(s8, 2, 8))
    bad[29] ^= 0xFF
    cases.append(("png_bad_ihdr_crc.png", bytes(bad)))
    bad = bytearray(png_bytes(s8, 2, 8, extra=chunks["gama"]))
    bad[33 + 12 + 3] ^= 0xFF  # gAMA's CRC: Pillow checks every chunk's CRC before IDAT
    cases.append(("png_bad_gama_crc.png", bytes(bad)))
    cases.append(("png_truncated.png", png_bytes(s8, 2, 8)[:-40]))
    cases.append(("png_pal16_illegal.png", png_bytes(idx, 3, 16, 0, pal)))
    return cases


def _save(im, fmt, **kw):
    import io
    kw = {k: v for k, v in kw.items() if v is not None}
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


# ---- JPEG ----

def photo(w, h, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    a = np.stack([128 + 100 * np.sin(x / 5) * np.cos(y / 7), 255 * x / w, 128 + 80 * np.sin((x + y) / 9)], -1)
    return Image.fromarray((a + rng.normal(0, 12, (h, w, 3))).clip(0, 255).astype(np.uint8))


def turbojpeg_cmyk(cmyk, quality=90):
    """CMYK pixels compressed by TurboJPEG, which stores them as YCCK (Adobe transform 2)."""
    lib = ctypes.CDLL(ctypes.util.find_library("turbojpeg") or "libturbojpeg.so.0")
    lib.tjInitCompress.restype = ctypes.c_void_p
    lib.tjCompress2.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                ctypes.c_int, ctypes.POINTER(ctypes.POINTER(ctypes.c_ubyte)),
                                ctypes.POINTER(ctypes.c_ulong), ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.tjFree.argtypes = [ctypes.c_void_p]
    lib.tjDestroy.argtypes = [ctypes.c_void_p]
    h, w, _ = cmyk.shape
    tj = lib.tjInitCompress()
    out, size = ctypes.POINTER(ctypes.c_ubyte)(), ctypes.c_ulong(0)
    TJPF_CMYK, TJSAMP_420 = 11, 2
    if lib.tjCompress2(tj, cmyk.tobytes(), w, 0, h, TJPF_CMYK, ctypes.byref(out), ctypes.byref(size),
                       TJSAMP_420, quality, 0):
        raise RuntimeError("tjCompress2 failed")
    data = ctypes.string_at(out, size.value)
    lib.tjFree(out)
    lib.tjDestroy(tj)
    return data


def strip_app14(jpeg):
    """The JPEG without its Adobe APP14 segment."""
    i = 2
    while i + 4 <= len(jpeg) and jpeg[i] == 0xFF and jpeg[i + 1] not in (0xDA, 0xD9):
        n = struct.unpack(">H", jpeg[i + 2:i + 4])[0]
        if jpeg[i + 1] == 0xEE:
            return jpeg[:i] + jpeg[i + 2 + n:]
        i += 2 + n
    raise ValueError("no APP14")


def set_sof_precision(jpeg, bits):
    i = jpeg.index(b"\xff\xc0")
    return jpeg[:i + 4] + bytes([bits]) + jpeg[i + 5:]


def jpeg_cases(tmp):
    """(name, bytes) for the JPEG matrix."""
    cases = []
    im = photo(75, 53, 1)  # not a multiple of any MCU size: partial blocks on both edges
    for sub, name in ((0, "444"), (1, "422"), (2, "420")):
        cases.append((f"jpg_pillow_{name}.jpg", _save(im, "JPEG", quality=90, subsampling=sub)))
    cases.append(("jpg_pillow_progressive.jpg", _save(im, "JPEG", quality=85, progressive=True)))
    cases.append(("jpg_pillow_gray.jpg", _save(im.convert("L"), "JPEG", quality=90)))
    cases.append(("jpg_pillow_cmyk_adobe.jpg", _save(im.convert("CMYK"), "JPEG", quality=95)))
    cases.append(("jpg_pillow_cmyk_no_adobe.jpg", strip_app14(_save(im.convert("CMYK"), "JPEG", quality=95))))
    cmyk = np.asarray(im.convert("CMYK"))
    cases.append(("jpg_turbojpeg_ycck.jpg", turbojpeg_cmyk(np.ascontiguousarray(cmyk))))
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 CW to display; open + convert ignores it
    cases.append(("jpg_exif_orientation6.jpg", _save(im, "JPEG", quality=90, exif=exif.tobytes())))
    # An ICC profile (APP2) and a comment: no colour management on either side.
    cases.append(("jpg_icc_comment.jpg", _save(im, "JPEG", quality=90, icc_profile=b"\0" * 200 + b"not a profile",
                                              comment=b"made by hand")))
    # cjpeg / jpegtran for what Pillow cannot write.
    ppm, pgm = f"{tmp}/src.ppm", f"{tmp}/src.pgm"
    im.save(ppm)
    im.convert("L").save(pgm)
    runs = {
        "jpg_cjpeg_arith.jpg": ["cjpeg", "-quality", "90", "-arithmetic", ppm],
        "jpg_cjpeg_arith_progressive.jpg": ["cjpeg", "-quality", "90", "-arithmetic", "-progressive", ppm],
        "jpg_cjpeg_restart1.jpg": ["cjpeg", "-quality", "90", "-restart", "1", ppm],
        "jpg_cjpeg_restart2blocks.jpg": ["cjpeg", "-quality", "90", "-restart", "2B", "-progressive", ppm],
        "jpg_cjpeg_440.jpg": ["cjpeg", "-quality", "90", "-sample", "1x2", ppm],
        "jpg_cjpeg_411.jpg": ["cjpeg", "-quality", "90", "-sample", "4x1", ppm],
        "jpg_cjpeg_rgb.jpg": ["cjpeg", "-quality", "90", "-rgb", ppm],
        "jpg_cjpeg_gray_arith.jpg": ["cjpeg", "-quality", "90", "-arithmetic", pgm],
        "jpg_cjpeg_float_dct.jpg": ["cjpeg", "-quality", "90", "-dct", "float", ppm],
        "jpg_cjpeg_optimize.jpg": ["cjpeg", "-quality", "75", "-optimize", "-sample", "2x2", ppm],
    }
    for name, cmd in runs.items():
        cases.append((name, subprocess.run(cmd, capture_output=True, check=True).stdout))
    base = dict(cases)["jpg_pillow_420.jpg"]
    p = subprocess.run(["jpegtran", "-arithmetic", "-restart", "1"], input=base, capture_output=True, check=True)
    cases.append(("jpg_jpegtran_arith_restart.jpg", p.stdout))
    # libjpeg warns and goes on; so does Pillow.
    cases.append(("jpg_junk_before_eoi.jpg", base[:-2] + b"\x00\x11\x22\xff\xd9"))
    cases.append(("jpg_trailing_bytes.jpg", base + b"\0junk after EOI"))
    # Refused by Pillow and by ds: 12-bit samples (libjpeg-turbo 2.1 decodes 8-bit only), and a
    # truncated file.
    cases.append(("jpg_12bit.jpg", set_sof_precision(base, 12)))
    cases.append(("jpg_truncated.jpg", base[: len(base) * 2 // 3]))
    return cases


def jpeg_header(data):
    """The markers up to the first scan: SOF type, precision, (h, v) sampling per component,
    the Adobe transform (None without APP14), whether there is a restart interval / EXIF / an
    ICC profile."""
    info = {"adobe": None, "dri": False, "exif": False, "icc": False}
    i = 2
    while i + 4 <= len(data) and data[i] == 0xFF:
        m, n = data[i + 1], struct.unpack(">H", data[i + 2:i + 4])[0]
        seg = data[i + 4:i + 2 + n]
        if m in (0xC0, 0xC1, 0xC2, 0xC9, 0xCA):
            info["sof"], info["bits"] = m, seg[0]
            info["sampling"] = [(seg[6 + 3 * c + 1] >> 4, seg[6 + 3 * c + 1] & 15) for c in range(seg[5])]
        elif m == 0xEE and seg[:5] == b"Adobe":
            info["adobe"] = seg[11]
        elif m == 0xDD:
            info["dri"] = struct.unpack(">H", seg[:2])[0] > 0
        elif m == 0xE1 and seg[:6] == b"Exif\0\0":
            info["exif"] = True
        elif m == 0xE2 and seg[:12] == b"ICC_PROFILE\0":
            info["icc"] = True
        elif m == 0xDA:
            break
        i += 2 + n
    return info


# What each JPEG of the matrix must be, checked on its header (so that a writer that quietly
# ignored an option cannot leave a layout untested).
JPEG_LAYOUT = {
    "jpg_pillow_444": lambda j: j["sampling"] == [(1, 1)] * 3,
    "jpg_pillow_422": lambda j: j["sampling"] == [(2, 1), (1, 1), (1, 1)],
    "jpg_pillow_420": lambda j: j["sampling"] == [(2, 2), (1, 1), (1, 1)] and j["sof"] == 0xC0,
    "jpg_pillow_progressive": lambda j: j["sof"] == 0xC2,
    "jpg_pillow_gray": lambda j: len(j["sampling"]) == 1,
    "jpg_pillow_cmyk_adobe": lambda j: len(j["sampling"]) == 4 and j["adobe"] == 0,
    "jpg_pillow_cmyk_no_adobe": lambda j: len(j["sampling"]) == 4 and j["adobe"] is None,
    "jpg_turbojpeg_ycck": lambda j: len(j["sampling"]) == 4 and j["adobe"] == 2,
    "jpg_exif_orientation6": lambda j: j["exif"],
    "jpg_icc_comment": lambda j: j["icc"],
    "jpg_cjpeg_arith": lambda j: j["sof"] == 0xC9,
    "jpg_cjpeg_arith_progressive": lambda j: j["sof"] == 0xCA,
    "jpg_cjpeg_restart1": lambda j: j["dri"],
    "jpg_cjpeg_restart2blocks": lambda j: j["dri"] and j["sof"] == 0xC2,
    "jpg_cjpeg_440": lambda j: j["sampling"] == [(1, 2), (1, 1), (1, 1)],
    "jpg_cjpeg_411": lambda j: j["sampling"] == [(4, 1), (1, 1), (1, 1)],
    "jpg_cjpeg_rgb": lambda j: len(j["sampling"]) == 3 and j["adobe"] == 0,
    "jpg_cjpeg_gray_arith": lambda j: len(j["sampling"]) == 1 and j["sof"] == 0xC9,
    "jpg_jpegtran_arith_restart": lambda j: j["sof"] == 0xC9 and j["dri"],
    "jpg_12bit": lambda j: j["bits"] == 12,
}


# ---- the comparison ----

def pillow_rgb(path):
    """Pillow's RGB pixels, or the reason it cannot give them."""
    try:
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB")), None
    except Exception as e:  # Pillow's refusals come as several exception types
        return None, f"{type(e).__name__}: {e}"


def read_ppm(path):
    with open(path, "rb") as f:
        data = f.read()
    # The driver writes "P6\nW H\n255\n" and the pixels (which may start with whitespace bytes).
    magic, size, maxval, rest = data.split(b"\n", 3)
    assert magic == b"P6" and maxval == b"255"
    w, h = map(int, size.split())
    return np.frombuffer(rest, np.uint8).reshape(h, w, 3)


def ds_rgb(path, tmp):
    out = f"{tmp}/ds.ppm"
    r = subprocess.run([DRIVER, "--decode", path, out], capture_output=True, text=True)
    if r.returncode == 1 and r.stdout.startswith("rejected: "):
        return None, r.stdout[len("rejected: "):].strip()
    if r.returncode:
        return None, f"driver exit {r.returncode}: {r.stderr.strip()}"
    return read_ppm(out), None


def compare(name, path, tmp):
    """One case: returns whether Pillow reads the file."""
    ref, why_not = pillow_rgb(path)
    got, reason = ds_rgb(path, tmp)
    if ref is None:
        report(f"decode_{name}", got is None and bool(reason),
               f"Pillow refuses ({why_not}) but ds decoded it" if got is not None else "rejected with no reason")
        if got is None:
            print(f"  {name}: Pillow: {why_not}; ds: {reason}", file=sys.stderr)
        return False
    if got is None:
        report(f"decode_{name}", False, f"Pillow reads it, ds rejects: {reason}")
    elif got.shape != ref.shape:
        report(f"decode_{name}", False, f"shape {got.shape}, Pillow {ref.shape}")
    else:
        d = np.abs(got.astype(np.int16) - ref.astype(np.int16))
        y, x, c = np.unravel_index(np.argmax(d), d.shape)
        report(f"decode_{name}", d.max() == 0,
               f"{np.count_nonzero(d)} of {d.size} values differ, worst {d.max()} at (y={y}, x={x}, c={c}): "
               f"ds {got[y, x, c]}, Pillow {ref[y, x, c]}")
    return True


def end_to_end(tmp, names, readable):
    """dspack over the folder: Pillow's readable files packed (pixels = Pillow + resize), the
    rest in rejected.txt with a reason."""
    root, size = f"{tmp}/tree", 24
    with open(f"{tmp}/train.txt", "w") as f:
        f.write(f"# ds-manifest 1 root={root}\n")
        for n in names:
            f.write(f"0\ta/{n}\n")
    with open(f"{tmp}/classes.txt", "w") as f:
        f.write("a\n")
    out = f"{tmp}/packed"
    r = subprocess.run([DSPACK, "-q", "-o", out, "--size", str(size), "--fit", "crop", "--no-shuffle",
                        "--max-reject", str(len(names)), f"{tmp}/train.txt"], capture_output=True, text=True)
    report("dspack_runs", r.returncode == 0, r.stderr.strip())
    if r.returncode:
        return
    with open(f"{out}/rejected.txt") as f:
        rejected = dict(line.rstrip("\n").split("\t", 1) for line in f if line.strip())
    want_rejected = {f"a/{n}" for n in names if not readable[n]}
    report("dspack_rejects_only_what_pillow_refuses", set(rejected) == want_rejected,
           f"rejected but Pillow reads: {sorted(set(rejected) - want_rejected)}; "
           f"Pillow refuses but packed: {sorted(want_rejected - set(rejected))}")
    report("dspack_rejections_give_reasons", all(v.strip() for v in rejected.values()), str(rejected))
    with h5py.File(f"{out}/shard-00000.h5", "r") as f:
        images = f["images"][:].astype(np.int16)
        paths = [p.decode() if isinstance(p, bytes) else p for p in f["paths"][:]]
    report("dspack_packs_what_pillow_reads", paths == [f"a/{n}" for n in names if readable[n]],
           f"{len(paths)} packed, {sum(readable.values())} readable")
    worst, worst_name = 0, ""
    for img, p in zip(images, paths):
        with Image.open(f"{root}/{p}") as im:
            ref = np.asarray(T.CenterCrop(size)(T.Resize(size)(im.convert("RGB"))), np.int16)
        d = int(np.abs(img - ref).max())
        if d > worst:
            worst, worst_name = d, p
    # Every file here is under 4 x 24 pixels on its shorter side, so none is DCT-scaled:
    # decode and resize are both Pillow's arithmetic, and the packed pixels must be equal.
    report("dspack_pixels_equal_pillow_resize", worst == 0, f"max |diff| {worst} on {worst_name}")


def main():
    missing = [t for t in ("cjpeg", "jpegtran") if not shutil.which(t)]
    if missing:
        report("jpeg_writers_present", False, f"{' and '.join(missing)} not found: install libjpeg-turbo-progs (make deps)")
        sys.exit(1)
    # Pillow warns on every palette image with tRNS that it is not converted to RGBA.
    warnings.simplefilter("ignore", UserWarning)
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory(dir=os.environ.get("DS_TEST_TMP")) as tmp:
        os.makedirs(f"{tmp}/tree/a")
        cases = png_cases(rng) + jpeg_cases(tmp)
        readable = {}
        for name, data in cases:
            with open(f"{tmp}/tree/a/{name}", "wb") as f:
                f.write(data)
            readable[name] = compare(name, f"{tmp}/tree/a/{name}", tmp)
        print(f"  {len(cases)} files, {sum(readable.values())} read by Pillow", file=sys.stderr)
        data = dict(cases)
        wrong = [n for n, ok in JPEG_LAYOUT.items() if not ok(jpeg_header(data[n + ".jpg"]))]
        report("jpeg_matrix_layouts_as_named", not wrong, f"not the layout their name says: {wrong}")
        end_to_end(tmp, [n for n, _ in cases], readable)
    sys.exit(status())


if __name__ == "__main__":
    main()
