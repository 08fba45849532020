package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// hostileJPEG is issue 43 row 2's file: a grayscale side×side progressive
// JPEG whose DC scan is followed by refinement scans of the AC band (Ah=1,
// Al=0) holding nothing but end-of-block runs of 32767 blocks (EOB14): a
// few dozen bytes a scan, yet Go's decoder walks all 620,944 blocks of a
// 6300×6300 image in every one. 6300×6300 with 400 scans is 102 KB.
func hostileJPEG(side, scans int) []byte {
	var out bytes.Buffer
	segment := func(marker byte, data []byte) {
		out.Write([]byte{0xFF, marker})
		_ = binary.Write(&out, binary.BigEndian, uint16(len(data)+2))
		out.Write(data)
	}
	// Entropy-coded bits, most significant first, 0xFF stuffed with 0x00.
	var acc, nacc byte
	put := func(v uint32, n int) {
		for i := n - 1; i >= 0; i-- {
			acc = acc<<1 | byte(v>>uint(i)&1)
			if nacc++; nacc == 8 {
				out.WriteByte(acc)
				if acc == 0xFF {
					out.WriteByte(0x00)
				}
				acc, nacc = 0, 0
			}
		}
	}
	pad := func() { // a scan's data ends on a byte, padded with 1 bits
		for nacc != 0 {
			put(1, 1)
		}
	}
	out.Write([]byte{0xFF, 0xD8}) // start of image
	q := make([]byte, 65)         // quantisation table 0, all ones
	for i := 1; i < len(q); i++ {
		q[i] = 1
	}
	segment(0xDB, q)
	segment(0xC2, []byte{8, byte(side >> 8), byte(side), byte(side >> 8), byte(side), 1, 1, 0x11, 0}) // progressive frame, one component
	// Huffman tables: DC 0 has one 1-bit code, category 0 (difference 0);
	// AC 0 has one 1-bit code, EOB14.
	dht := append([]byte{0x00, 1}, make([]byte, 15)...)
	dht = append(dht, 0x00, 0x10, 1)
	dht = append(dht, make([]byte, 15)...)
	segment(0xC4, append(dht, 0xE0))
	blocks := ((side + 7) / 8) * ((side + 7) / 8)
	segment(0xDA, []byte{1, 1, 0x00, 0, 0, 0}) // DC first scan: Ss=Se=0, Ah=Al=0
	for range blocks {
		put(0, 1)
	}
	pad()
	for range scans {
		segment(0xDA, []byte{1, 1, 0x00, 1, 63, 0x10}) // AC refinement: Ss=1, Se=63, Ah=1, Al=0
		for left := blocks; left > 0; {
			run := min(left, 1<<15-1)
			put(0, 1)                  // EOB14
			put(uint32(run-1<<14), 14) // the run is 2^14 plus these bits
			left -= run
		}
		pad()
	}
	out.Write([]byte{0xFF, 0xD9}) // end of image
	return out.Bytes()
}

// cpuTime is the CPU (user and system) the process has used.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command's closing parenthesis start at the
	// third (state); utime and stime are the 14th and 15th, in clock
	// ticks of 1/100 s (USER_HZ on Linux).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	var user, sys int64
	fmt.Sscan(f[11], &user)
	fmt.Sscan(f[12], &sys)
	return time.Duration(user+sys) * 10 * time.Millisecond
}

// cpuSettled waits until the process uses less than 5 % of a core (the
// decodes of abandoned uploads, if any go on, have ended) or a minute has
// passed, and returns its CPU time then.
func cpuSettled(t *testing.T, pid int) time.Duration {
	t.Helper()
	last := cpuTime(t, pid)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		time.Sleep(time.Second)
		now := cpuTime(t, pid)
		if now-last < 50*time.Millisecond {
			return now
		}
		last = now
	}
	return last
}

// imageForm is a multipart form holding b as its file part, whole: sent
// with its Content-Length, as a browser sends a form.
func imageForm(t *testing.T, name, contentType string, b []byte) (*bytes.Buffer, string) {
	t.Helper()
	body, ct := multipartBody(part{field: "file", filename: name, contentType: contentType, data: bytes.NewReader(b)})
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, body); err != nil {
		t.Fatal(err)
	}
	return &buf, ct
}

// abandonedUpload posts b as an image with c's session and gives up after
// 2 s, as a browser tab closed mid-request: the connection is closed.
func abandonedUpload(t *testing.T, c *client, b []byte) {
	t.Helper()
	body, ct := imageForm(t, "abandoned.jpg", "image/jpeg", b)
	req, err := http.NewRequest("POST", c.base+"/upload/image", body)
	if err != nil {
		t.Error(err)
		return
	}
	req.Header.Set("Content-Type", ct)
	start := time.Now()
	resp, err := (&http.Client{Jar: c.http.Jar, Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		t.Logf("abandoned upload: %v after %v", err, time.Since(start).Round(time.Millisecond))
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	t.Logf("abandoned upload: answered %d after %v", resp.StatusCode, time.Since(start).Round(time.Millisecond))
}

// progressiveAttack runs the attack through the gateway on a platform with
// env: two hostile uploads abandoned after 2 s, then one whose answer is
// read, then another user's 64×64 PNG, each 100-200 ms after the other. It returns the hostile upload's answer
// and how long it took, the PNG's answer and how long it took, and the
// files process's CPU time spent by the whole attack.
func progressiveAttack(t *testing.T, env map[string]string) (hostile rawResp, hostileTook time.Duration, small rawResp, smallTook time.Duration, cpu time.Duration, attacker *client) {
	t.Helper()
	b := hostileJPEG(6300, 400)
	png := testPNG(t, 64, 64)
	t.Logf("hostile JPEG %d KB", len(b)>>10)

	p, sec, _ := platform(t, env)
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	admin.mustStatus(201, "POST", "/users", map[string]any{"email": "other@example.com", "password": "correct horse battery", "fullName": "Other", "edv": "E-2"})
	other := signIn(t, p.GatewayURL, "other@example.com", "correct horse battery")
	pid := p.Procs["files"].Pid()
	form, ct := imageForm(t, "scans.jpg", "image/jpeg", b)
	smallForm, smallCT := imageForm(t, "small.png", "image/png", png)
	before := cpuSettled(t, pid)

	var wg sync.WaitGroup
	wg.Add(4)
	for range 2 {
		go func() {
			defer wg.Done()
			abandonedUpload(t, admin, b)
		}()
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the abandoned uploads are first in line
	go func() {
		defer wg.Done()
		start := time.Now()
		hostile = admin.raw("POST", "/upload/image", nil, form, ct)
		hostileTook = time.Since(start)
	}()
	time.Sleep(200 * time.Millisecond)
	go func() {
		defer wg.Done()
		start := time.Now()
		small = other.raw("POST", "/upload/image", nil, smallForm, smallCT)
		smallTook = time.Since(start)
	}()
	wg.Wait()
	cpu = cpuSettled(t, pid) - before
	t.Logf("hostile: %d in %v; small PNG: %d in %v; files CPU %v", hostile.status, hostileTook.Round(time.Millisecond), small.status, smallTook.Round(time.Millisecond), cpu.Round(10*time.Millisecond))
	return hostile, hostileTook, small, smallTook, cpu, admin
}

// checkNothingStored asserts c owns no file or image.
func checkNothingStored(t *testing.T, c *client) {
	t.Helper()
	_, list, _ := c.do("GET", "/files?limit=50", nil)
	if fl, ok := list["files"].([]any); !ok || len(fl) != 0 {
		t.Errorf("the attacker's records: %v, want none", list)
	}
}

// TestHostileProgressiveJPEG replays issue 43 row 2 against the real
// processes through the gateway: a 6300×6300 grayscale progressive JPEG
// of 400 refinement scans of end-of-block runs (102 KB; Go's decoder
// walks all 620,944 blocks in each scan: 11.5-13.3 s of CPU) uploaded to
// POST /upload/image, twice more by clients that give up after 2 s, while
// another user uploads a 64×64 PNG. Two uploads abandoned cost 42.8 s of
// files' CPU and the PNG waited 27.1 s for an image slot. Now the file's
// scans are weighed from its markers before any decoding: 422
// image_too_complex (with the limit) at once, nothing stored, the PNG
// stored within a couple of seconds, and files' CPU for the whole attack
// a fraction of one decode.
func TestHostileProgressiveJPEG(t *testing.T) {
	hostile, took, small, smallTook, cpu, attacker := progressiveAttack(t, nil)
	if hostile.status != 422 {
		t.Errorf("hostile JPEG: %d %s, want 422", hostile.status, hostile.body)
	} else if m := hostile.json(t); m["code"] != "image_too_complex" || m["limit"] != float64(16) {
		t.Errorf("hostile JPEG: body %v, want code image_too_complex with the limit 16", m)
	}
	if took > 3*time.Second {
		t.Errorf("hostile JPEG refused after %v, want at once (< 3 s)", took)
	}
	if small.status != 201 || smallTook > 3*time.Second {
		t.Errorf("another user's 64x64 PNG: %d after %v (%s), want 201 within 3 s", small.status, smallTook, small.body)
	}
	if cpu > 4*time.Second {
		t.Errorf("files spent %v of CPU on the attack, want < 4 s (one decode of the file takes 12 s or more)", cpu)
	}
	checkNothingStored(t, attacker)
}

// TestHostileProgressiveJPEGPastTheScanBound is the same attack on a files
// service whose scan bound admits the file (FILES_IMAGE_MAX_SCANS=1000),
// with a decode deadline of 3 s. The image memory budget runs one such
// file at a time (240 MiB each of 320 MiB), so the first abandoned upload
// decodes while the rest wait in line. When their clients give up, the
// gateway closes its connections to files: the decode stops and the one
// waiting leaves the line, so the upload whose answer is read starts at
// about 2 s and gets 422 image_timeout at the 3 s deadline, and the PNG is
// stored in about 2 s, less than the deadline (if the abandoned uploads
// went on to their deadlines, the PNG would wait 6 s). Files' CPU for the
// whole attack stays bounded (three decodes to their end take 36 s or
// more).
func TestHostileProgressiveJPEGPastTheScanBound(t *testing.T) {
	hostile, took, small, smallTook, cpu, attacker := progressiveAttack(t, map[string]string{
		"FILES_IMAGE_MAX_SCANS": "1000", "FILES_IMAGE_DECODE_TIMEOUT": "3s"})
	if hostile.status != 422 {
		t.Errorf("hostile JPEG: %d %s, want 422", hostile.status, hostile.body)
	} else if m := hostile.json(t); m["code"] != "image_timeout" {
		t.Errorf("hostile JPEG: body %v, want code image_timeout", m)
	}
	if took > 9*time.Second {
		t.Errorf("hostile JPEG answered after %v, want about 2 s in line and the 3 s deadline", took)
	}
	if small.status != 201 || smallTook > 5*time.Second {
		t.Errorf("another user's 64x64 PNG: %d after %v (%s), want 201 in about 2 s (the abandoned uploads end when their clients go)", small.status, smallTook, small.body)
	}
	if cpu > 15*time.Second {
		t.Errorf("files spent %v of CPU on the attack, want < 15 s", cpu)
	}
	checkNothingStored(t, attacker)
}
