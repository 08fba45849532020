package e2e

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/scripts/stack"
)

// zeroPNG16 is a real, complete w×h PNG at 16-bit RGBA (colour type 6,
// depth 16) whose pixels are all zero: every row is written, so it decodes
// without error, yet the file is a few hundred KB (the attack's 6300×6300
// was 309 KB). It is written row by row, never holding the raw image.
func zeroPNG16(t *testing.T, w, h int) []byte {
	t.Helper()
	chunk := func(out *bytes.Buffer, typ string, data []byte) {
		_ = binary.Write(out, binary.BigEndian, uint32(len(data)))
		out.WriteString(typ)
		out.Write(data)
		_ = binary.Write(out, binary.BigEndian, crc32.ChecksumIEEE(append([]byte(typ), data...)))
	}
	var out bytes.Buffer
	out.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(w)), uint32(h))
	chunk(&out, "IHDR", append(ihdr, 16, 6, 0, 0, 0))
	var z bytes.Buffer
	zw, err := zlib.NewWriterLevel(&z, zlib.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	row := make([]byte, 1+w*8) // filter type 0, then 8 bytes a pixel
	for range h {
		if _, err := zw.Write(row); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	chunk(&out, "IDAT", z.Bytes())
	chunk(&out, "IEND", nil)
	return out.Bytes()
}

// vmRSS is the process's resident set now, in bytes.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &kb)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestHostileImageMemory replays issue 34 row 5 against the real processes
// through the gateway: four 16-bit RGBA PNGs of 6300×6300 (40 MP, under
// the pixel limit, but 8 bytes a pixel: 317 MB decoded, each a few hundred
// KB uploaded) sent to POST /upload/image at once. The files service's
// peak RSS went to 2-3 GiB and stayed at 1.5 GB; every one was stored.
// Now each is refused from its header with 422 image_too_much_memory and
// nothing is stored, while four 3000×3000 16-bit images sent at the same
// time (within the per-image budget, together over the process budget, so
// the budget runs them in turn) are all stored; the files process's peak
// RSS stays under 512 MiB and its resident set drops back afterwards.
func TestHostileImageMemory(t *testing.T) {
	hostileImages(t, nil, 422)
}

// TestHostileImageMemorySerialised is the same attack on a files service
// whose per-image budget admits the hostile images (FILES_IMAGE_MAX_MEMORY
// = FILES_IMAGE_MEMORY = 400 MiB): the process-wide budget then runs them
// one at a time, each is stored, and the peak still stays under 512 MiB.
func TestHostileImageMemorySerialised(t *testing.T) {
	hostileImages(t, map[string]string{"FILES_IMAGE_MAX_MEMORY": "400MiB", "FILES_IMAGE_MEMORY": "400MiB", "FILES_IMAGE_WAIT": "2m"}, 201)
}

func hostileImages(t *testing.T, env map[string]string, hostileStatus int) {
	hostile := zeroPNG16(t, 6300, 6300)
	fits := zeroPNG16(t, 3000, 3000)
	t.Logf("hostile PNG %d KB, within-budget PNG %d KB", len(hostile)>>10, len(fits)>>10)

	p, sec, _ := platform(t, env)
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	files := p.Procs["files"]
	pid := files.Pid()
	before := vmRSS(t, pid)
	if err := stack.ResetPeakRSS(pid); err != nil {
		t.Fatal(err)
	}

	type result struct {
		hostile bool
		r       rawResp
	}
	results := make(chan result, 8)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := fits
			if i%2 == 0 {
				b = hostile
			}
			r := admin.upload("/upload/image", part{field: "file", filename: fmt.Sprintf("img%d.png", i), contentType: "image/png", data: bytes.NewReader(b)})
			results <- result{i%2 == 0, r}
		}()
	}
	wg.Wait()
	close(results)
	stored := 0
	for res := range results {
		if res.hostile && hostileStatus == 422 {
			if res.r.status != 422 {
				t.Errorf("hostile image: %d %s, want 422", res.r.status, res.r.body)
				continue
			}
			m := res.r.json(t)
			if m["code"] != "image_too_much_memory" || m["limit"] == nil {
				t.Errorf("hostile image: body %v, want code image_too_much_memory with the limit", m)
			}
			continue
		}
		if res.r.status != 201 {
			t.Errorf("image within budget: %d %s, want 201", res.r.status, res.r.body)
			continue
		}
		img, _ := res.r.json(t)["image"].(map[string]any)
		if img == nil || img["width"] != float64(2048) || img["height"] != float64(2048) {
			t.Errorf("image within budget: %v, want 2048x2048", img)
		}
		stored++
	}
	_, list, _ := admin.do("GET", "/files?limit=50", nil)
	if fl, _ := list["files"].([]any); len(fl) != stored {
		t.Errorf("%d records listed, want the %d images stored: %v", len(fl), stored, list)
	}

	peak, err := stack.PeakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("files RSS before %d MiB, peak %d MiB", before>>20, peak>>20)
	if peak >= 512<<20 {
		t.Errorf("files peak RSS %d MiB with four hostile and four large images at once, want < 512", peak>>20)
	}
	// The memory goes back: the resident set falls to within 96 MiB of
	// where it started (it was 1.5 GB minutes after the attack).
	var now int64
	for deadline := time.Now().Add(20 * time.Second); ; {
		now = vmRSS(t, pid)
		if now <= before+96<<20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("files RSS after %d MiB", now>>20)
	if now > before+96<<20 {
		t.Errorf("files RSS %d MiB after the uploads, started at %d MiB", now>>20, before>>20)
	}
}
