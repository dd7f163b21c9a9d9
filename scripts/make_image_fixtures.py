#!/usr/bin/env python3
"""Writes the picture fixtures of tests/fixtures/images/ and, for each, the RGB bytes Pillow
gives for ImageOps.exif_transpose(Image.open(f)).convert("RGB") (what transformers' load_image
hands the image processor). The ctest image_decode_parity runs `qvl decode` on every picture
listed in expected.txt and compares its bytes with these, byte for byte; Python is not needed
at test time.

Pillow is used only here (pip install pillow). Formats and variants Pillow cannot write (an
interlaced PNG, a 2-bit grey PNG, a GIF whose first frame is offset, interlaced and transparent)
are written by hand below, so Pillow's reader still decides the expected bytes.

    python3 scripts/make_image_fixtures.py [OUT_DIR]
"""
import io
import os
import random
import struct
import sys
import zlib

from PIL import Image, ImageOps, features

W, H = 41, 27  # odd sizes: partial MCUs and chroma edges


def picture(w=W, h=H, seed=1):
    """Gradients, a hard edge and noise: enough detail for chroma upsampling and the IDCT to
    matter, small enough to commit."""
    rnd = random.Random(seed)
    im = Image.new("RGB", (w, h))
    px = im.load()
    for y in range(h):
        for x in range(w):
            r = (x * 255) // (w - 1)
            g = (y * 255) // (h - 1)
            b = 220 if (x // 7 + y // 5) % 2 else 30
            n = rnd.randint(-12, 12)
            px[x, y] = (max(0, min(255, r + n)), max(0, min(255, g - n)), b)
    return im


def exif_with_orientation(o):
    ex = Image.Exif()
    ex[0x0112] = o
    return ex.tobytes()


# ---- hand-written PNG -------------------------------------------------------------------------

def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_raw(w, h, colour, depth, rows, interlace=False, palette=None):
    """rows: per picture row, the packed sample bytes (no filter byte)."""
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
    bits = channels * depth

    def row_bytes(n):
        return (n * bits + 7) // 8

    def sample_run(y, xs):
        """Repack the samples of row y at columns xs (bit-packed for depth < 8)."""
        if bits >= 8:
            step = bits // 8
            return b"".join(rows[y][x * step:(x + 1) * step] for x in xs)
        out, acc, n = bytearray(), 0, 0
        for x in xs:
            byte = rows[y][(x * bits) // 8]
            v = (byte >> (8 - bits - (x * bits) % 8)) & ((1 << bits) - 1)
            acc = (acc << bits) | v
            n += bits
            if n == 8:
                out.append(acc)
                acc, n = 0, 0
        if n:
            out.append(acc << (8 - n))
        return bytes(out)

    raw = bytearray()
    if not interlace:
        for y in range(h):
            raw += b"\x00" + rows[y][:row_bytes(w)]
    else:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4),
                  (1, 0, 2, 2), (0, 1, 1, 2)]
        for x0, y0, dx, dy in passes:
            xs = list(range(x0, w, dx))
            if not xs:
                continue
            for y in range(y0, h, dy):
                raw += b"\x00" + sample_run(y, xs)
    data = b"\x89PNG\r\n\x1a\n"
    data += png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, 1 if interlace else 0))
    if palette:
        data += png_chunk(b"PLTE", palette)
    data += png_chunk(b"IDAT", zlib.compress(bytes(raw), 9))
    data += png_chunk(b"IEND", b"")
    return data


# ---- hand-written GIF -------------------------------------------------------------------------

def gif_lzw(indices):
    """LZW with 8-bit roots and a clear code before every 250 literals, so every code is 9 bits
    wide: valid, simple, not small."""
    clear, end = 256, 257
    codes = []
    for i, v in enumerate(indices):
        if i % 250 == 0:
            codes.append(clear)
        codes.append(v)
    codes.append(end)
    acc, n, out = 0, 0, bytearray()
    for c in codes:
        acc |= c << n
        n += 9
        while n >= 8:
            out.append(acc & 255)
            acc >>= 8
            n -= 8
    if n:
        out.append(acc & 255)
    blocks = bytearray([8])
    for i in range(0, len(out), 255):
        part = out[i:i + 255]
        blocks += bytes([len(part)]) + part
    return bytes(blocks + b"\x00")


def gif_raw(sw, sh, palette, frames, global_table=True):
    """frames: (left, top, w, h, indices row-major, interlaced, transparent index or None,
    local palette or None)."""
    bits = 8
    data = b"GIF89a" + struct.pack("<HH", sw, sh)
    if global_table:
        data += bytes([0x80 | 0x70 | (bits - 1), 0, 0]) + palette.ljust(3 << bits, b"\x00")
    else:
        data += bytes([0x70, 0, 0])
    for left, top, fw, fh, idx, inter, trans, local in frames:
        if trans is not None:
            data += b"\x21\xf9\x04" + bytes([1]) + b"\x00\x00" + bytes([trans]) + b"\x00"
        flags = 0x40 if inter else 0
        if local:
            flags |= 0x80 | (bits - 1)
        data += b"\x2c" + struct.pack("<HHHH", left, top, fw, fh) + bytes([flags])
        if local:
            data += local.ljust(3 << bits, b"\x00")
        order = list(range(fh))
        if inter:
            order = (list(range(0, fh, 8)) + list(range(4, fh, 8)) + list(range(2, fh, 4)) +
                     list(range(1, fh, 2)))
        stream = [idx[y * fw + x] for y in order for x in range(fw)]
        data += gif_lzw(stream)
    return data + b"\x3b"


# ---- orientation from XMP and PNG text (Pillow's getexif) ---------------------------------------

def xmp_packet(o, element=False):
    """An XMP packet holding tiff:Orientation o, as an attribute or as an element."""
    rdf = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
    head = ('<?xpacket begin="" id="W5M0MpCehiHzreSzNTczkc9d"?><x:xmpmeta xmlns:x="adobe:ns:meta/">'
            '<rdf:RDF xmlns:rdf="%s"><rdf:Description rdf:about="" '
            'xmlns:tiff="http://ns.adobe.com/tiff/1.0/"' % rdf)
    body = ('><tiff:Orientation>%d</tiff:Orientation></rdf:Description>' % o if element
            else ' tiff:Orientation="%d"/>' % o)
    return head + body + '</rdf:RDF></x:xmpmeta><?xpacket end="w"?>'


def exif_without_orientation():
    ex = Image.Exif()
    ex[0x010F] = "qvl"  # Make: an EXIF block whose IFD0 has no Orientation
    return ex.tobytes()


def raw_profile_exif(exif):
    """ImageMagick's "Raw profile type exif" text: three header lines, then hex in lines of 72."""
    hx = exif.hex()
    return "\nexif\n%8d\n%s\n" % (len(exif), "\n".join(hx[i:i + 72] for i in range(0, len(hx), 72)))


def png_with_chunks(im, before=(), after=()):
    """Pillow's PNG of im with extra chunks (type, data) put before the first IDAT or after the
    last one."""
    buf = io.BytesIO()
    im.save(buf, "PNG")
    data = buf.getvalue()
    first = data.index(b"IDAT") - 4
    end = data.index(b"IEND") - 4
    pre = b"".join(png_chunk(t, d) for t, d in before)
    post = b"".join(png_chunk(t, d) for t, d in after)
    return data[:first] + pre + data[first:end] + post + data[end:]


def itxt(key, text, compressed=False):
    v = text.encode("utf-8")
    return key.encode("latin-1") + b"\0" + bytes([1 if compressed else 0, 0]) + b"\0\0" + (
        zlib.compress(v) if compressed else v)


def orientation_fixtures(pic, f, save):
    xmp = "XML:com.adobe.xmp"
    raw = "Raw profile type exif"
    # PNG: XMP in iTXt (attribute form, element form compressed), after the pixel data too.
    f["png_xmp_itxt_attr6.png"] = png_with_chunks(pic, before=[(b"iTXt", itxt(xmp, xmp_packet(6)))])
    f["png_xmp_itxt_element8_zip.png"] = png_with_chunks(
        pic, before=[(b"iTXt", itxt(xmp, xmp_packet(8, element=True), compressed=True))])
    f["png_xmp_after_idat5.png"] = png_with_chunks(pic, after=[(b"iTXt", itxt(xmp, xmp_packet(5)))])
    # PNG: the EXIF block as hex text (ImageMagick's), in zTXt and in tEXt.
    f["png_raw_profile_ztxt3.png"] = png_with_chunks(pic, before=[(b"zTXt", raw.encode() + b"\0\0" +
        zlib.compress(raw_profile_exif(exif_with_orientation(3)).encode()))])
    f["png_raw_profile_text7.png"] = png_with_chunks(pic, before=[(b"tEXt", raw.encode() + b"\0" +
        raw_profile_exif(exif_with_orientation(7)[6:]).encode())])
    # PNG conflicts: an EXIF Orientation of 1 wins over XMP 6; EXIF without the tag lets XMP 2 in;
    # a later XMP chunk replaces an earlier one.
    f["png_exif1_xmp6.png"] = png_with_chunks(
        pic, before=[(b"eXIf", exif_with_orientation(1)[6:]), (b"iTXt", itxt(xmp, xmp_packet(6)))])
    f["png_exif_no_tag_xmp2.png"] = png_with_chunks(
        pic, before=[(b"eXIf", exif_without_orientation()[6:]), (b"iTXt", itxt(xmp, xmp_packet(2)))])
    f["png_xmp_twice_8_then_4.png"] = png_with_chunks(
        pic, before=[(b"iTXt", itxt(xmp, xmp_packet(8))), (b"iTXt", itxt(xmp, xmp_packet(4, True)))])
    # JPEG: APP1 XMP, both forms; EXIF 3 against XMP 6 (EXIF wins); EXIF without the tag and XMP.
    save("jpeg_xmp_attr6.jpg", pic, "JPEG", quality=85, xmp=xmp_packet(6).encode())
    save("jpeg_xmp_element8_progressive.jpg", pic, "JPEG", quality=85, progressive=True,
         xmp=xmp_packet(8, element=True).encode())
    save("jpeg_exif3_xmp6.jpg", pic, "JPEG", quality=85, exif=exif_with_orientation(3),
         xmp=xmp_packet(6).encode())
    save("jpeg_exif_no_tag_xmp5.jpg", pic, "JPEG", quality=85, exif=exif_without_orientation(),
         xmp=xmp_packet(5, element=True).encode())
    # WebP: an XMP chunk, and EXIF 8 against XMP 5.
    save("webp_xmp6.webp", pic, "WEBP", quality=80, xmp=xmp_packet(6).encode())
    save("webp_exif8_xmp5.webp", pic, "WEBP", lossless=True, exif=exif_with_orientation(8),
         xmp=xmp_packet(5).encode())
    save("webp_xmp_element7.webp", pic, "WEBP", lossless=True,
         xmp=xmp_packet(7, element=True).encode())


# ---- the fixtures -----------------------------------------------------------------------------

def pillow_bytes(path):
    with Image.open(path) as im:
        out = ImageOps.exif_transpose(im).convert("RGB")
    return out.size, out.tobytes()


def fixtures():
    pic = picture()
    f = {}

    def save(name, im, fmt, **kw):
        buf = io.BytesIO()
        im.save(buf, fmt, **kw)
        f[name] = buf.getvalue()

    # JPEG: the subsamplings, baseline and progressive, grey, CMYK, EXIF orientations.
    save("jpeg_420.jpg", pic, "JPEG", quality=85, subsampling=2)
    save("jpeg_422.jpg", pic, "JPEG", quality=90, subsampling=1)
    save("jpeg_444.jpg", pic, "JPEG", quality=95, subsampling=0)
    save("jpeg_420_q50.jpg", pic, "JPEG", quality=50, subsampling=2)
    save("jpeg_progressive_420.jpg", pic, "JPEG", quality=85, subsampling=2, progressive=True)
    save("jpeg_progressive_444.jpg", pic, "JPEG", quality=90, subsampling=0, progressive=True)
    save("jpeg_grey.jpg", pic.convert("L"), "JPEG", quality=85)
    save("jpeg_cmyk.jpg", pic.convert("CMYK"), "JPEG", quality=90)
    save("jpeg_exif6.jpg", pic, "JPEG", quality=85, exif=exif_with_orientation(6))
    save("jpeg_exif5.jpg", pic, "JPEG", quality=85, exif=exif_with_orientation(5))
    save("jpeg_exif3_progressive.jpg", pic, "JPEG", quality=85, progressive=True,
         exif=exif_with_orientation(3))

    # PNG: Pillow's writer for the common kinds, hand-written ones for the rest.
    save("png_rgb8.png", pic, "PNG")
    save("png_rgba.png", pic.convert("RGBA").rotate(30), "PNG")  # transparent corners
    save("png_la.png", pic.convert("LA"), "PNG")
    save("png_grey1.png", pic.convert("1"), "PNG")
    save("png_palette.png", pic.quantize(16), "PNG")
    save("png_exif8.png", pic, "PNG", exif=exif_with_orientation(8))
    grey16 = Image.frombytes("I;16", (W, H), bytes(
        v for i in range(W * H) for v in struct.pack("<H", (i * 37) % 700)))  # over 255: clipped
    save("png_grey16.png", grey16, "PNG")
    rgb = pic.tobytes()
    rows16 = [b"".join(bytes([rgb[(y * W + x) * 3 + c], (x * 7 + c) & 255]) for x in range(W)
                       for c in range(3)) for y in range(H)]
    f["png_rgb16.png"] = png_raw(W, H, 2, 16, rows16)
    rows8 = [rgb[y * W * 3:(y + 1) * W * 3] for y in range(H)]
    f["png_interlaced_rgb8.png"] = png_raw(W, H, 2, 8, rows8, interlace=True)
    grey2 = [bytes(sum(((x + k + y // 3) % 4) << (6 - 2 * k) for k in range(4) if x + k < W)
                   for x in range(0, W, 4)) for y in range(H)]
    f["png_grey2_interlaced.png"] = png_raw(W, H, 0, 2, grey2, interlace=True)
    pal = bytes([10, 20, 30, 200, 100, 50, 0, 255, 0])
    idx = [bytes([(x + y) % 5 for x in range(W)]) for y in range(H)]  # 3, 4: past the PLTE
    f["png_palette_short.png"] = png_raw(W, H, 3, 8, idx, palette=pal)

    # GIF: Pillow's writer, and hand-written first frames Pillow cannot write.
    save("gif_basic.gif", pic.quantize(64), "GIF")
    anim = [pic.quantize(32), pic.rotate(90, expand=False).quantize(32)]
    buf = io.BytesIO()
    anim[0].save(buf, "GIF", save_all=True, append_images=anim[1:], duration=100)
    f["gif_animated.gif"] = buf.getvalue()
    gpal = bytes(v for i in range(256) for v in ((i * 5) & 255, (i * 11) & 255, (255 - i) & 255))
    fidx = [(x * 3 + y * 5) % 40 for y in range(19) for x in range(30)]
    f["gif_offset_transparent_interlaced.gif"] = gif_raw(
        W, H, gpal, [(5, 4, 30, 19, fidx, True, 7, None)])
    f["gif_frame_past_screen.gif"] = gif_raw(
        20, 10, gpal, [(12, 6, 30, 19, fidx, False, None, None)])
    ramp = bytes(v for i in range(256) for v in (i, i, i))
    f["gif_grey_ramp_local.gif"] = gif_raw(
        W, H, gpal, [(0, 0, 30, 19, [v * 6 for v in fidx], False, None, ramp)])
    f["gif_no_table.gif"] = gif_raw(
        30, 19, b"", [(0, 0, 30, 19, [v * 6 for v in fidx], False, None, None)],
        global_table=False)

    # WebP: lossy, lossless, with alpha, animated, and an EXIF orientation.
    save("webp_lossy.webp", pic, "WEBP", quality=80)
    save("webp_lossless.webp", pic, "WEBP", lossless=True)
    save("webp_lossy_alpha.webp", pic.convert("RGBA").rotate(30), "WEBP", quality=80)
    save("webp_lossless_alpha.webp", pic.convert("RGBA").rotate(30), "WEBP", lossless=True)
    buf = io.BytesIO()
    anim = [pic, pic.rotate(90)]
    anim[0].save(buf, "WEBP", save_all=True, append_images=anim[1:], duration=100, lossless=True)
    f["webp_animated.webp"] = buf.getvalue()
    save("webp_exif6.webp", pic, "WEBP", quality=80, exif=exif_with_orientation(6))

    # Orientation from XMP and from PNG text, as Pillow's getexif finds it.
    orientation_fixtures(pic, f, save)

    # PGM/PPM: 8-bit, 16-bit, and maxvals that Pillow rescales.
    save("pnm_rgb8.ppm", pic, "PPM")
    grey = pic.convert("L").tobytes()
    f["pnm_grey16.pgm"] = b"P5\n# sixteen bits\n%d %d\n65535\n" % (W, H) + b"".join(
        struct.pack(">H", v * 3) for v in grey)  # over 255 from 86 up: clipped
    f["pnm_grey_maxval15.pgm"] = b"P5 %d %d 15\n" % (W, H) + bytes(v % 16 for v in grey)
    f["pnm_rgb_maxval1000.ppm"] = b"P6\n%d %d\n1000\n" % (W, H) + b"".join(
        struct.pack(">H", (v * 4) % 1001) for v in rgb)
    return f


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "images")
    os.makedirs(out, exist_ok=True)
    lines = ["# picture width height: the RGB bytes Pillow %s (libjpeg-turbo %s, libwebp %s) gives "
             "for ImageOps.exif_transpose(Image.open(f)).convert(\"RGB\") are in picture.rgb"
             % (Image.__version__, features.version("libjpeg_turbo"), features.version("webp"))]
    for name, data in fixtures().items():
        path = os.path.join(out, name)
        with open(path, "wb") as fh:
            fh.write(data)
        (w, h), rgb = pillow_bytes(path)
        with open(path + ".rgb", "wb") as fh:
            fh.write(rgb)
        lines.append("%s %d %d" % (name, w, h))
    with open(os.path.join(out, "expected.txt"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
