#!/usr/bin/python3
"""Generates the .npy/.npz/.safetensors fixtures for tests/test_npy.cc and test_safetensors.cc.

ok_* files are well formed (written by numpy, or by hand for safetensors) with values the tests
recompute; every other file breaks exactly one rule, named by the file. Deterministic: rerun with
/usr/bin/python3 make_malformed.py (numpy needed) and the outputs are byte-identical.
"""
import io, json, os, struct, zipfile, zlib
import numpy as np

os.chdir(os.path.dirname(os.path.abspath(__file__)))


def write(name, data):
    with open(name, "wb") as f:
        f.write(data)


def npy_bytes(a, version=None):
    buf = io.BytesIO()
    if version is None:
        np.save(buf, a)
    else:
        np.lib.format.write_array(buf, a, version=version)
    return buf.getvalue()


def npy_with_header(header, data=b"", version=(1, 0)):
    """A .npy with a hand-written header dict, padded like numpy's."""
    h = header.encode("latin1")
    total = 10 + len(h) + 1
    h += b" " * ((64 - total % 64) % 64) + b"\n"
    return b"\x93NUMPY" + bytes(version) + struct.pack("<H", len(h)) + h + data


# ---- well-formed arrays; the tests recompute these values ----
f32 = (np.arange(12, dtype=np.float32) * 0.5 - 2).reshape(3, 4)
f64 = np.array([[1.0 / 3, -2.5e-300], [1e300, np.pi]], dtype=np.float64)
i64 = np.array([-(2**40), -1, 0, 7, 2**40], dtype=np.int64)
i32 = np.arange(-3, 3, dtype=np.int32).reshape(2, 1, 3)
b1 = np.array([True, False, False, True])
u8 = np.arange(250, 256, dtype=np.uint8)
empty = np.zeros((0, 5), dtype=np.float32)
scalar = np.float64(2.75)
label = np.bytes_(b"softmax")
arrays = dict(f32=f32, f64=f64, i64=i64, i32=i32, b1=b1, u8=u8, empty=empty, scalar=scalar, label=label)

np.savez("ok_savez.npz", **arrays)
np.savez_compressed("ok_savez_compressed.npz", **arrays)
write("ok_f32.npy", npy_bytes(f32))
write("ok_f32_v2.npy", npy_bytes(f32, version=(2, 0)))
write("ok_f32_v3.npy", npy_bytes(f32, version=(3, 0)))
write("ok_fortran_1d.npy", npy_with_header(
    "{'descr': '<i4', 'fortran_order': True, 'shape': (3,), }", np.arange(3, dtype="<i4").tobytes()))
write("ok_trailing_bytes.npy", npy_bytes(f32) + b"garbage")

# ---- malformed .npy ----
good = npy_bytes(f32)
write("npy_empty.npy", b"")
write("npy_bad_magic.npy", b"\x93NUMPZ" + good[6:])
write("npy_bad_version.npy", good[:6] + b"\x04\x00" + good[8:])
write("npy_header_past_end.npy", good[:8] + struct.pack("<H", 4000) + good[10:])
write("npy_header_not_dict.npy", npy_with_header("[1, 2, 3]"))
write("npy_header_syntax.npy", npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3}"))
write("npy_missing_shape.npy", npy_with_header("{'descr': '<f4', 'fortran_order': False, }"))
write("npy_fortran_order.npy", npy_bytes(np.asfortranarray(f32)))
write("npy_big_endian.npy", npy_bytes(f32.astype(">f4")))
write("npy_object.npy", npy_with_header("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", b"\0" * 16))
write("npy_unicode.npy", npy_bytes(np.array(["abc", "de"])))
write("npy_structured.npy", npy_bytes(np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")])))
write("npy_negative_dim.npy", npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3), }"))
write("npy_shape_overflow.npy", npy_with_header(
    "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"))
write("npy_shape_too_big.npy", npy_with_header(
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }", b"\0" * 16))
write("npy_truncated.npy", good[:-5])

# zip64 records everywhere they can be (as zipfile writes archives over 4 GiB): sizes and offset
# in the central directory's zip64 extra field, zip64 end of central directory and locator.
def zip64_npz(name, data):
    n, crc, FF = name.encode(), zlib.crc32(data), 0xFFFFFFFF
    local = struct.pack("<IHHHHHIIIHH", 0x04034b50, 45, 0, 0, 0, 0x21, crc, FF, FF, len(n), 20)
    local += n + struct.pack("<HHQQ", 1, 16, len(data), len(data))
    cd = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 0x032D, 45, 0, 0, 0, 0x21, crc, FF, FF,
                     len(n), 28, 0, 0, 0, 0o644 << 16, FF)
    cd += n + struct.pack("<HHQQQ", 1, 24, len(data), len(data), 0)
    cd_offset = len(local) + len(data)
    end64 = struct.pack("<IQHHIIQQQQ", 0x06064b50, 44, 45, 45, 0, 0, 1, 1, len(cd), cd_offset)
    locator = struct.pack("<IIQI", 0x07064b50, 0, cd_offset + len(cd), 1)
    end = struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, 0xFFFF, 0xFFFF, FF, FF, 0)
    return local + data + cd + end64 + locator + end


write("ok_zip64.npz", zip64_npz("x.npy", npy_bytes(f32)))
assert np.array_equal(np.load("ok_zip64.npz")["x"], f32)  # numpy agrees it is well formed

# ---- malformed .npz (all made from stored/deflated archives of x = f32, y = i64) ----
def savez(compressed=False, **kw):
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **kw)
    return bytearray(buf.getvalue())


def fixed(name):
    """A zip entry with numpy's fixed timestamp, so reruns are byte-identical."""
    return zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))


def central(z):
    """Offset of the first central directory record."""
    end = z.rindex(b"PK\x05\x06")
    return struct.unpack_from("<I", z, end + 16)[0]


stored = savez(x=f32, y=i64)
deflated = savez(True, x=np.zeros((64, 64), np.float32), y=i64)
write("npz_not_zip.npz", good)  # a .npy renamed to .npz

z = bytearray(stored); z[0:4] = b"PK\x09\x09"
write("npz_bad_local_signature.npz", z)

z = bytearray(stored); struct.pack_into("<I", z, central(z) + 20, 0x7fff0000)  # csize of x.npy
struct.pack_into("<I", z, central(z) + 24, 0x7fff0000)
write("npz_entry_past_end.npz", z)

z = bytearray(stored); z[200] ^= 0xFF  # a data byte of x.npy (its header ends at 30+5+20+128)
write("npz_crc_mismatch.npz", z)

z = bytearray(deflated)
name_len, extra_len = struct.unpack_from("<HH", z, 26)
z[30 + name_len + extra_len] = 0xFF  # first deflate block: BTYPE 11, reserved
write("npz_inflate_error.npz", z)

z = bytearray(deflated); struct.pack_into("<I", z, central(z) + 24, 100)  # declares too little
write("npz_size_mismatch.npz", z)

z = bytearray(deflated); struct.pack_into("<I", z, central(z) + 24, 0xfffffff0)  # 4 GiB from ~100 B
write("npz_zip_bomb.npz", z)

buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as zf:
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zf.writestr(fixed("a.npy"), npy_bytes(f32))
        zf.writestr(fixed("a.npy"), npy_bytes(i64))
write("npz_duplicate_names.npz", buf.getvalue())

buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as zf:
    zf.writestr(fixed("a.npy"), npy_bytes(f32), compress_type=zipfile.ZIP_BZIP2)
write("npz_unsupported_method.npz", buf.getvalue())

buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as zf:
    zf.writestr(fixed("notes.txt"), b"hello")
write("npz_not_npy_entry.npz", buf.getvalue())

buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as zf:
    zf.writestr(fixed("a.npy"), good[:-5])
write("npz_truncated_member.npz", buf.getvalue())

# ---- safetensors, built by hand like the reference implementation ----
def st(header, data=b"", raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


w = np.arange(6, dtype="<f4").reshape(2, 3)
ids = np.array([3, -1], dtype="<i8")
ok_header = {"__metadata__": {"format": "pt", "step": "7"},
             "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
             "ids": {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]},
             "flag": {"dtype": "BOOL", "shape": [], "data_offsets": [40, 41]}}
ok_data = w.tobytes() + ids.tobytes() + b"\x01"
write("ok.safetensors", st(ok_header, ok_data))


def broken(name, change, data=ok_data):
    h = json.loads(json.dumps(ok_header))
    change(h)
    write(name, st(h, data))


write("st_too_short.safetensors", b"\x10\0\0\0\0")
write("st_header_past_end.safetensors", struct.pack("<Q", 1000) + b"{}")
write("st_header_absurd.safetensors", struct.pack("<Q", 1 << 40) + b"{}")
write("st_not_json.safetensors", st(None, raw_header=b'{"w": {"dtype": "F32",'))
write("st_not_object.safetensors", st([1, 2, 3]))
broken("st_metadata_not_string.safetensors", lambda h: h["__metadata__"].update(step=7))
broken("st_missing_dtype.safetensors", lambda h: h["w"].pop("dtype"))
broken("st_shape_wrong_type.safetensors", lambda h: h["w"].update(shape="2x3"))
broken("st_entry_not_object.safetensors", lambda h: h.update(w=[0, 24]))
broken("st_unknown_dtype.safetensors", lambda h: h["w"].update(dtype="F7"))
broken("st_negative_dim.safetensors", lambda h: h["w"].update(shape=[-2, -3]))
broken("st_size_overflow.safetensors", lambda h: h["w"].update(shape=[2**40, 2**40]))
broken("st_offsets_not_pair.safetensors", lambda h: h["w"].update(data_offsets=[0]))
broken("st_offsets_reversed.safetensors", lambda h: h["w"].update(data_offsets=[24, 0]))
broken("st_offsets_past_end.safetensors", lambda h: h["flag"].update(data_offsets=[40, 41]),
       data=ok_data[:40])
broken("st_size_mismatch.safetensors", lambda h: h["w"].update(shape=[2, 2]))
broken("st_overlap.safetensors", lambda h: (h["ids"].update(data_offsets=[16, 32]),
                                             h["flag"].update(data_offsets=[32, 33])), data=ok_data[:33])
broken("st_gap.safetensors", lambda h: (h["ids"].update(data_offsets=[28, 44]),
                                         h["flag"].update(data_offsets=[44, 45])), data=ok_data + b"\0" * 4)
broken("st_trailing_data.safetensors", lambda h: None, data=ok_data + b"extra")
write("st_duplicate_names.safetensors", st(None, raw_header=(
    b'{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},'
    b'"w":{"dtype":"I64","shape":[2],"data_offsets":[24,40]}}')))
