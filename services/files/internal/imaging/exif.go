package imaging

import (
	"bytes"
	"encoding/binary"
)

// Orientation returns the EXIF orientation (1..8) of an image, 1 when there
// is none or it cannot be read. It looks in a JPEG's APP1 "Exif" segment, a
// PNG's eXIf chunk and a WebP's EXIF chunk; every offset is bounds-checked
// (this parser faces the network, see FuzzOrientation).
func Orientation(f Format, b []byte) int {
	var tiff []byte
	switch f {
	case JPEG:
		tiff = jpegExif(b)
	case PNG:
		tiff = pngExif(b)
	case WebP:
		tiff = webpExif(b)
	}
	if tiff == nil {
		return 1
	}
	return tiffOrientation(tiff)
}

func jpegExif(b []byte) []byte {
	i := 2 // after SOI
	for i+4 <= len(b) {
		if b[i] != 0xFF {
			return nil
		}
		marker := b[i+1]
		if marker == 0xFF { // fill byte
			i++
			continue
		}
		if marker == 0xD8 || marker >= 0xD0 && marker <= 0xD7 || marker == 0x01 {
			i += 2 // markers without a length
			continue
		}
		if marker == 0xDA || marker == 0xD9 { // start of scan, end of image
			return nil
		}
		n := int(binary.BigEndian.Uint16(b[i+2 : i+4]))
		if n < 2 || i+2+n > len(b) {
			return nil
		}
		seg := b[i+4 : i+2+n]
		if marker == 0xE1 && bytes.HasPrefix(seg, []byte("Exif\x00\x00")) {
			return seg[6:]
		}
		i += 2 + n
	}
	return nil
}

func pngExif(b []byte) []byte {
	i := 8
	for i+8 <= len(b) {
		n := int(binary.BigEndian.Uint32(b[i : i+4]))
		typ := string(b[i+4 : i+8])
		if n < 0 || n > len(b)-i-12 {
			return nil
		}
		if typ == "eXIf" {
			return b[i+8 : i+8+n]
		}
		if typ == "IDAT" || typ == "IEND" {
			return nil
		}
		i += 12 + n // length, type, data, CRC
	}
	return nil
}

func webpExif(b []byte) []byte {
	i := 12
	for i+8 <= len(b) {
		typ := string(b[i : i+4])
		n := int(binary.LittleEndian.Uint32(b[i+4 : i+8]))
		if n < 0 || n > len(b)-i-8 {
			return nil
		}
		if typ == "EXIF" {
			d := b[i+8 : i+8+n]
			// Some writers keep JPEG's "Exif\0\0" prefix.
			return bytes.TrimPrefix(d, []byte("Exif\x00\x00"))
		}
		i += 8 + n + n&1 // chunks are padded to even sizes
	}
	return nil
}

// tiffOrientation reads tag 0x0112 from IFD0 of a TIFF structure.
func tiffOrientation(t []byte) int {
	if len(t) < 8 {
		return 1
	}
	var bo binary.ByteOrder
	switch string(t[:2]) {
	case "II":
		bo = binary.LittleEndian
	case "MM":
		bo = binary.BigEndian
	default:
		return 1
	}
	if bo.Uint16(t[2:4]) != 42 {
		return 1
	}
	off := int64(bo.Uint32(t[4:8]))
	if off < 8 || off+2 > int64(len(t)) {
		return 1
	}
	count := int64(bo.Uint16(t[off : off+2]))
	for k := int64(0); k < count; k++ {
		e := off + 2 + 12*k
		if e+12 > int64(len(t)) {
			return 1
		}
		if bo.Uint16(t[e:e+2]) != 0x0112 {
			continue
		}
		if typ := bo.Uint16(t[e+2 : e+4]); typ != 3 { // SHORT
			return 1
		}
		v := int(bo.Uint16(t[e+8 : e+10]))
		if v < 1 || v > 8 {
			return 1
		}
		return v
	}
	return 1
}
