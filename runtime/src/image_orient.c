/* Which orientation a picture's metadata gives, by the rules of Pillow's Image.getexif and
 * ImageOps.exif_transpose (Pillow 13), which transformers' load_image applies:
 *   - the EXIF block (JPEG APP1 "Exif", PNG eXIf or tEXt "exif", PNG "Raw profile type exif"
 *     text, WebP EXIF) is read first; when its IFD0 holds an Orientation tag (0x0112), that tag
 *     decides, whatever its value, and XMP is not looked at;
 *   - otherwise the XMP packet (PNG iTXt "XML:com.adobe.xmp", JPEG APP1
 *     "http://ns.adobe.com/xap/1.0/", WebP "XMP ") decides through the first match of the
 *     regular expression  tiff:Orientation(="|>)([0-9])  : the attribute form
 *     tiff:Orientation="6" and the element form <tiff:Orientation>6</tiff:Orientation> alike;
 *   - exif_transpose then acts on the values 2..8 only; 1, 0, 9 or a value it cannot use leave
 *     the picture as stored.
 * The format readers (image_jpeg.c, image_png_text.c, image_webp.c) find the blocks; this file
 * reads them. */
#include <string.h>

#include "image_formats.h"

/* TIFF field types Pillow's ImageFileDirectory_v2 loads (others are skipped as if absent), and
 * the bytes of one value of each. */
static int tiff_type_size(uint32_t type) {
    switch (type) {
    case 1: case 2: case 6: case 7: return 1; /* BYTE, ASCII, SBYTE, UNDEFINED */
    case 3: case 8: return 2;                 /* SHORT, SSHORT */
    case 4: case 9: case 11: case 13: return 4; /* LONG, SLONG, FLOAT, IFD */
    case 5: case 10: case 12: case 16: case 17: case 18: return 8; /* RATIONALs, DOUBLE, 8-byte */
    default: return 0;
    }
}

int qvl_tiff_orientation_tag(const uint8_t *t, size_t n) {
    /* Pillow drops one or two leading "Exif\0\0" before the TIFF header. */
    for (int k = 0; k < 2 && n >= 6 && memcmp(t, "Exif\0\0", 6) == 0; k++) t += 6, n -= 6;
    if (n < 8) return QVL_ORIENT_ABSENT;
    bool le;
    if (t[0] == 'I' && t[1] == 'I') le = true;
    else if (t[0] == 'M' && t[1] == 'M') le = false;
    else return QVL_ORIENT_ABSENT;
    if (qvl_rd16(t + 2, le) != 42) return QVL_ORIENT_ABSENT;
    const uint32_t ifd = qvl_rd32(t + 4, le);
    if (ifd > n || n - ifd < 2) return QVL_ORIENT_ABSENT;
    const uint32_t count = qvl_rd16(t + ifd, le);
    /* Entries are read while they fit: Pillow keeps those before a cut directory. */
    for (uint32_t i = 0; i < count && (size_t)ifd + 2 + ((size_t)i + 1) * 12 <= n; i++) {
        const uint8_t *e = t + ifd + 2 + (size_t)i * 12;
        if (qvl_rd16(e, le) != 0x0112) continue;
        const uint32_t type = qvl_rd16(e + 2, le), cnt = qvl_rd32(e + 4, le);
        const int unit = tiff_type_size(type);
        if (unit == 0 || cnt == 0) continue; /* skipped by Pillow: a later entry may count */
        const uint64_t size = (uint64_t)cnt * (uint64_t)unit;
        const uint8_t *v = e + 8;
        if (size > 4) { /* stored at an offset; Pillow skips the entry when it is past the end */
            const uint32_t at = qvl_rd32(e + 8, le);
            if (at > n || size > n - at) continue;
            v = t + at;
        }
        /* The tag takes its first value; only whole numbers select a transpose. */
        switch (type) {
        case 3: case 8: return (int)(type == 8 ? (int16_t)qvl_rd16(v, le) : (int)qvl_rd16(v, le));
        case 4: case 9: {
            const uint32_t x = qvl_rd32(v, le);
            return x >= 1 && x <= 8 ? (int)x : QVL_ORIENT_UNUSABLE;
        }
        default: return QVL_ORIENT_UNUSABLE;
        }
    }
    return QVL_ORIENT_ABSENT;
}

int qvl_tiff_orientation(const uint8_t *t, size_t n) {
    const int o = qvl_tiff_orientation_tag(t, n);
    return o >= 1 && o <= 8 ? o : 1;
}

int qvl_xmp_orientation(const uint8_t *x, size_t n) {
    static const char key[] = "tiff:Orientation";
    const size_t k = sizeof key - 1;
    for (size_t i = 0; i + k < n; i++) {
        if (x[i] != 't' || memcmp(x + i, key, k) != 0) continue;
        size_t j = i + k;
        if (x[j] == '>') j += 1;
        else if (x[j] == '=' && j + 1 < n && x[j + 1] == '"') j += 2;
        else continue;
        if (j < n && x[j] >= '0' && x[j] <= '9') return x[j] - '0';
    }
    return QVL_ORIENT_ABSENT;
}

int qvl_orientation_pick(int exif_tag, int xmp_tag) {
    const int o = exif_tag != QVL_ORIENT_ABSENT ? exif_tag : xmp_tag;
    return o >= 2 && o <= 8 ? o : 1;
}
