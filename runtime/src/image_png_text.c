/* A PNG's text and metadata chunks, read here rather than by libpng (which is told to skip every
 * ancillary chunk, see image_png.c): zTXt and iTXt chunks of a few kilobytes can inflate to
 * megabytes each, and libpng would inflate and keep them all. The rules are Pillow's
 * PngImagePlugin (13), whose pixels and metadata qvl matches:
 *   - a zTXt, or an iTXt with its compression flag set and method 0, is inflated; more than
 *     QVL_PNG_TEXT_CHUNK_MAX bytes (Pillow's MAX_TEXT_CHUNK) refuses the picture, as does text
 *     over QVL_PNG_TEXT_TOTAL_MAX in all (MAX_TEXT_MEMORY, counted in characters as Pillow
 *     does); a zTXt compression method other than 0 refuses it too; data zlib rejects is
 *     empty text, a cut stream keeps what inflated;
 *   - the metadata keys are the chunk keywords, a later chunk replacing an earlier one:
 *     eXIf (and a tEXt "exif") is the EXIF block, "Raw profile type exif" holds one as hex after
 *     three lines of header (used only without an EXIF block), "XML:com.adobe.xmp" is XMP (a
 *     text value first; the bytes of an iTXt one whose text is not UTF-8 otherwise);
 *   - every chunk up to IEND counts, after the pixel data too (Pillow reads those on load).
 * Only one chunk's inflated text (at most QVL_PNG_TEXT_CHUNK_MAX bytes) and one decoded raw
 * profile are held at a time; the orientation they carry is kept as a number. */
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "image_formats.h"

#define XMP_KEY "XML:com.adobe.xmp"
#define RAW_EXIF_KEY "Raw profile type exif"

typedef struct png_meta {
    const char *what;
    qvl_error *err;
    uint8_t *inflated; /* QVL_PNG_TEXT_CHUNK_MAX bytes, allocated for the first compressed text */
    int64_t text_chars;
    bool has_exif, has_raw_exif;
    int exif_tag, raw_exif_tag;
    int xmp_text_tag, xmp_bytes_tag; /* QVL_ORIENT_ABSENT also when the packet was empty */
    bool xmp_text_set;
} png_meta;

/* Characters of strict UTF-8 (Python's "strict" decoder: no overlong forms, surrogates or code
 * points past U+10FFFF); -1 when not UTF-8. */
static int64_t utf8_chars(const uint8_t *s, size_t n) {
    int64_t chars = 0;
    for (size_t i = 0; i < n; chars++) {
        const uint8_t c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) len = 1, cp = c, min = 0;
        else if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
        else return -1;
        if (len > n - i) return -1;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return -1;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
        i += len;
    }
    return chars;
}

static int hex_digit(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Python's whitespace for bytes.fromhex (which skips it between pairs). */
static bool hex_space(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Pillow: bytes.fromhex("".join(text.split("\n")[3:])), then Exif.load. Fewer than three lines
 * give an empty block (no tag); hex it cannot read makes Pillow raise, and qvl applies no
 * orientation then. */
static qvl_status raw_exif_tag(png_meta *m, const uint8_t *s, size_t n, int *tag) {
    size_t i = 0;
    for (int lines = 0; lines < 3; lines++) {
        const uint8_t *nl = memchr(s + i, '\n', n - i);
        if (!nl) {
            *tag = QVL_ORIENT_ABSENT;
            return QVL_OK;
        }
        i = (size_t)(nl - s) + 1;
    }
    uint8_t *bin = malloc((n - i) / 2 + 1);
    if (!bin) return qvl_fail(m->err, QVL_E_NOMEM, "%s: out of memory", m->what);
    size_t got = 0;
    bool ok = true;
    while (ok) {
        while (i < n && (hex_space(s[i]))) i++;
        if (i >= n) break;
        /* newlines were removed by the join, so a pair may straddle one */
        size_t j = i + 1;
        while (j < n && s[j] == '\n') j++;
        const int hi = hex_digit(s[i]), lo = j < n ? hex_digit(s[j]) : -1;
        if (hi < 0 || lo < 0) ok = false;
        else bin[got++] = (uint8_t)(hi << 4 | lo), i = j + 1;
    }
    *tag = !ok ? QVL_ORIENT_UNUSABLE : got ? qvl_tiff_orientation_tag(bin, got) : QVL_ORIENT_ABSENT;
    free(bin);
    return QVL_OK;
}

/* Inflates one zlib stream into m->inflated. *len: the bytes it gave; *usable false when zlib
 * rejects the data (Pillow's zlib.error). Refuses text past QVL_PNG_TEXT_CHUNK_MAX. */
static qvl_status inflate_text(png_meta *m, const char *chunk, const uint8_t *z, size_t zn,
                               size_t *len, bool *usable) {
    *len = 0;
    *usable = true;
    if (!m->inflated && !(m->inflated = malloc(QVL_PNG_TEXT_CHUNK_MAX)))
        return qvl_fail(m->err, QVL_E_NOMEM, "%s: out of memory", m->what);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit(&zs) != Z_OK) return qvl_fail(m->err, QVL_E_NOMEM, "%s: out of memory", m->what);
    zs.next_in = (Bytef *)(uintptr_t)z;
    zs.avail_in = (uInt)zn; /* zn < 2^31: a chunk length */
    zs.next_out = m->inflated;
    zs.avail_out = QVL_PNG_TEXT_CHUNK_MAX;
    const int rc = inflate(&zs, Z_FINISH);
    *len = QVL_PNG_TEXT_CHUNK_MAX - zs.avail_out;
    const bool over = rc != Z_STREAM_END && zs.avail_out == 0 && zs.avail_in > 0;
    inflateEnd(&zs);
    if (over)
        return qvl_fail(m->err, QVL_E_LIMIT,
                        "%s: PNG %s chunk inflates to more than %d bytes of text (a "
                        "decompression bomb; Pillow refuses it too)",
                        m->what, chunk, QVL_PNG_TEXT_CHUNK_MAX);
    if (rc != Z_STREAM_END && rc != Z_BUF_ERROR) *usable = false, *len = 0;
    return QVL_OK;
}

static qvl_status count_text(png_meta *m, int64_t chars) {
    m->text_chars += chars;
    if (m->text_chars > QVL_PNG_TEXT_TOTAL_MAX)
        return qvl_fail(m->err, QVL_E_LIMIT,
                        "%s: PNG text chunks hold more than %d characters in all (Pillow refuses "
                        "it too)",
                        m->what, QVL_PNG_TEXT_TOTAL_MAX);
    return QVL_OK;
}

static bool key_is(const uint8_t *k, size_t kn, const char *name) {
    return kn == strlen(name) && memcmp(k, name, kn) == 0;
}

/* A text value stored under keyword k (Pillow's info[k] = text). */
static qvl_status set_text(png_meta *m, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn) {
    if (key_is(k, kn, XMP_KEY)) {
        m->xmp_text_set = vn > 0;
        m->xmp_text_tag = qvl_xmp_orientation(v, vn);
    } else if (key_is(k, kn, RAW_EXIF_KEY)) {
        m->has_raw_exif = true;
        return raw_exif_tag(m, v, vn, &m->raw_exif_tag);
    }
    return QVL_OK;
}

/* key NUL rest: the split Pillow does (no NUL: all key, empty rest). */
static void split_key(const uint8_t *s, size_t n, size_t *kn, const uint8_t **v, size_t *vn) {
    const uint8_t *nul = memchr(s, 0, n);
    *kn = nul ? (size_t)(nul - s) : n;
    *v = nul ? nul + 1 : s + n;
    *vn = nul ? n - *kn - 1 : 0;
}

static qvl_status on_tEXt(png_meta *m, const uint8_t *s, size_t n) {
    size_t kn, vn;
    const uint8_t *v;
    split_key(s, n, &kn, &v, &vn);
    if (kn == 0) return QVL_OK;
    if (key_is(s, kn, "exif")) { /* kept as bytes, as an EXIF block */
        m->has_exif = true;
        m->exif_tag = qvl_tiff_orientation_tag(v, vn);
    }
    qvl_status st = set_text(m, s, kn, v, vn);
    return st == QVL_OK ? count_text(m, (int64_t)vn) : st;
}

static qvl_status on_zTXt(png_meta *m, const uint8_t *s, size_t n) {
    size_t kn, vn;
    const uint8_t *v;
    split_key(s, n, &kn, &v, &vn);
    if (vn > 0 && v[0] != 0)
        return qvl_fail(m->err, QVL_E_PARSE, "%s: PNG zTXt chunk with compression method %d",
                        m->what, v[0]);
    size_t len = 0;
    bool usable;
    qvl_status st = inflate_text(m, "zTXt", v + (vn > 0), vn - (vn > 0), &len, &usable);
    if (st != QVL_OK || kn == 0) return st;
    st = set_text(m, s, kn, m->inflated, len);
    return st == QVL_OK ? count_text(m, (int64_t)len) : st;
}

static qvl_status on_iTXt(png_meta *m, const uint8_t *s, size_t n) {
    size_t kn, rn;
    const uint8_t *r;
    split_key(s, n, &kn, &r, &rn);
    if (kn == n || rn < 2) return QVL_OK; /* no NUL after the keyword, or no flags */
    const int compressed = r[0], method = r[1];
    const uint8_t *lang = r + 2, *end = r + rn;
    const uint8_t *nul1 = memchr(lang, 0, (size_t)(end - lang));
    if (!nul1) return QVL_OK;
    const uint8_t *tk = nul1 + 1;
    const uint8_t *nul2 = memchr(tk, 0, (size_t)(end - tk));
    if (!nul2) return QVL_OK;
    const uint8_t *v = nul2 + 1;
    size_t vn = (size_t)(end - v);
    if (compressed) {
        if (method != 0) return QVL_OK;
        size_t len;
        bool usable;
        qvl_status st = inflate_text(m, "iTXt", v, vn, &len, &usable);
        if (st != QVL_OK || !usable) return st;
        v = m->inflated, vn = len;
    }
    if (key_is(s, kn, XMP_KEY)) m->xmp_bytes_tag = vn ? qvl_xmp_orientation(v, vn) : QVL_ORIENT_ABSENT;
    const int64_t chars = utf8_chars(v, vn);
    if (utf8_chars(lang, (size_t)(nul1 - lang)) < 0 || utf8_chars(tk, (size_t)(nul2 - tk)) < 0 ||
        chars < 0)
        return QVL_OK;
    qvl_status st = set_text(m, s, kn, v, vn);
    return st == QVL_OK ? count_text(m, chars) : st;
}

qvl_status qvl_png_scan_chunks(const uint8_t *p, size_t n, const char *what,
                               const qvl_image_stop *stop, int *orientation, qvl_error *err) {
    png_meta m = {.what = what, .err = err, .exif_tag = QVL_ORIENT_ABSENT,
                  .raw_exif_tag = QVL_ORIENT_ABSENT, .xmp_text_tag = QVL_ORIENT_ABSENT,
                  .xmp_bytes_tag = QVL_ORIENT_ABSENT};
    qvl_status st = QVL_OK;
    for (size_t i = 8; st == QVL_OK && i + 12 <= n;) {
        const uint32_t len = qvl_rd32(p + i, false);
        if (len > n - i - 12) break;
        const uint8_t *type = p + i + 4, *data = p + i + 8;
        if (memcmp(type, "IEND", 4) == 0) break;
        if (memcmp(type, "eXIf", 4) == 0) {
            m.has_exif = true;
            m.exif_tag = qvl_tiff_orientation_tag(data, len);
        } else if (memcmp(type, "tEXt", 4) == 0) {
            st = on_tEXt(&m, data, len);
        } else if (memcmp(type, "zTXt", 4) == 0) {
            st = on_zTXt(&m, data, len);
        } else if (memcmp(type, "iTXt", 4) == 0) {
            st = on_iTXt(&m, data, len);
        }
        /* A text chunk inflates up to a megabyte: the caller's deadline is asked after each. */
        if (st == QVL_OK && type[0] != 'I' && qvl_image_should_stop(stop))
            st = qvl_image_stopped(what, err);
        i += 12 + (size_t)len;
    }
    free(m.inflated);
    if (st != QVL_OK) return st;
    const int exif = m.has_exif ? m.exif_tag : m.has_raw_exif ? m.raw_exif_tag : QVL_ORIENT_ABSENT;
    const int xmp = m.xmp_text_set ? m.xmp_text_tag : m.xmp_bytes_tag;
    *orientation = qvl_orientation_pick(exif, xmp);
    return QVL_OK;
}
