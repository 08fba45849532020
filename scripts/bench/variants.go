package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"time"

	"github.com/acme/platform/scripts/stack"
)

// benchVariants: a 100x100 thumbnail of a 12-megapixel JPEG, the
// platform's image variant (GET /images/:id?w=100&h=100 through the
// gateway, anonymous) beside PocketBase's thumb (GET
// /api/files/photos/:record/:file?thumb=100x100 of a public collection
// whose file field lists 100x100), both cropped to the middle. First the
// first request of each (the render), over three images of each side, the
// median reported; then cached requests, in alternating rounds, with the
// CPU per request of every process of each stack. The platform renders
// from the image it stored at upload (at most FILES_IMAGE_MAX_SIDE a
// side), PocketBase from the original file: that difference is part of
// what is measured.
func benchVariants(e *env) error {
	const rounds, workers, images = 3, 32, 3
	bin, err := pocketBaseBinary(e.ctx, e.out)
	if err != nil {
		return err
	}
	suEmail, suPass := "root@bench.local", "pb"+stack.Secret(12)
	pb, err := startPocketBase(e.ctx, bin, filepath.Join(e.tmp, "pocketbase-thumbs"), suEmail, suPass)
	if err != nil {
		return err
	}
	defer pb.Stop()
	c := httpClient(64)
	su, _, err := call(c, "POST", pb.URL+"/api/collections/_superusers/auth-with-password",
		map[string]string{"identity": suEmail, "password": suPass}, nil, 200)
	if err != nil {
		return err
	}
	suHdr := map[string]string{"Authorization": fmt.Sprint(su["token"])}
	if _, _, err := call(c, "POST", pb.URL+"/api/collections", map[string]any{
		"name": "photos", "type": "base", "listRule": "", "viewRule": "",
		"fields": []map[string]any{{"name": "file", "type": "file", "maxSelect": 1, "maxSize": 64 << 20,
			"mimeTypes": []string{"image/jpeg"}, "thumbs": []string{"100x100"}}},
	}, suHdr, 200); err != nil {
		return fmt.Errorf("pocketbase collection: %w", err)
	}

	form, ctype, err := jpegForm(4000, 3000)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.out, "  a 4000x3000 JPEG, %.1f MiB in its form; PocketBase %s on %s\n", float64(len(form))/(1<<20), pocketBaseVersion, pb.URL)
	cookie, err := signInCookie(e)
	if err != nil {
		return err
	}
	upload := func(url string, hdr map[string]string, want int) (map[string]any, error) {
		h := map[string]string{"Content-Type": ctype}
		for k, v := range hdr {
			h[k] = v
		}
		resp, err := send(e.ctx, c, "POST", url, form, h)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			return nil, fmt.Errorf("POST %s: %d %.300s", url, resp.StatusCode, body)
		}
		var m map[string]any
		return m, json.Unmarshal(body, &m)
	}
	var pbURLs, platURLs []string
	for range images {
		rec, err := upload(pb.URL+"/api/collections/photos/records", suHdr, 200)
		if err != nil {
			return err
		}
		pbURLs = append(pbURLs, fmt.Sprintf("%s/api/files/photos/%v/%v?thumb=100x100", pb.URL, rec["id"], rec["file"]))
		img, err := upload(e.p.GatewayURL+"/upload/image", map[string]string{"Cookie": "sessionId=" + cookie}, 201)
		if err != nil {
			return err
		}
		m, _ := img["image"].(map[string]any)
		platURLs = append(platURLs, fmt.Sprintf("%s/images/%v?w=100&h=100", e.p.GatewayURL, m["id"]))
	}

	// First requests: each renders (and stores) the thumbnail.
	first := func(urls []string) (time.Duration, string, error) {
		var ds []time.Duration
		for _, u := range urls {
			t0 := time.Now()
			resp, err := send(e.ctx, c, "GET", u, nil, nil)
			if err != nil {
				return 0, "", err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			d := time.Since(t0)
			if resp.StatusCode != 200 || !bytes.HasPrefix(body, []byte{0xFF, 0xD8}) {
				return 0, "", fmt.Errorf("GET %s: %d %.200q", u, resp.StatusCode, body)
			}
			ds = append(ds, d)
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		l := ""
		for _, d := range ds {
			l += " " + d.Round(time.Millisecond).String()
		}
		return ds[len(ds)/2], l, nil
	}
	pbFirst, pbAll, err := first(pbURLs)
	if err != nil {
		return err
	}
	platFirst, platAll, err := first(platURLs)
	if err != nil {
		return err
	}
	e.report("variants", "first request (render), PocketBase thumb", fmt.Sprintf("median %s; each%s", pbFirst.Round(time.Millisecond), pbAll), "")
	e.report("variants", "first request (render), platform variant", fmt.Sprintf("median %s; each%s", platFirst.Round(time.Millisecond), platAll), "")
	e.report("variants", "first render platform ÷ PocketBase (time)", fmt.Sprintf("%.2f %s", platFirst.Seconds()/pbFirst.Seconds(), mark(platFirst <= pbFirst)), "<= 1")

	// Cached requests of one thumbnail each.
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	raw := func(url string) (func(int) error, error) {
		h, err := newRawHitter("GET", url, nil, nil, http.StatusOK, workers)
		if err != nil {
			return nil, err
		}
		closers = append(closers, h.close)
		return h.hit, nil
	}
	pbHit, err := raw(pbURLs[0])
	if err != nil {
		return err
	}
	platHit, err := raw(platURLs[0])
	if err != nil {
		return err
	}
	pbSample := func() cpuSample { return samplePid(pb.Pid(), "pocketbase") }
	platSample := platformCPU(e, pb.Pid())
	load(e.ctx, workers, time.Second, pbHit)
	load(e.ctx, workers, time.Second, platHit)
	var pbSide, platSide side
	for range rounds {
		if err := pbSide.run(e.ctx, workers, e.seconds, pbSample, pbHit); err != nil {
			return err
		}
		if err := platSide.run(e.ctx, workers, e.seconds, platSample, platHit); err != nil {
			return err
		}
	}
	e.report("variants", fmt.Sprintf("PocketBase cached thumb (%d conns)", workers), pbSide.String(), "")
	e.report("variants", fmt.Sprintf("platform cached variant via gateway (%d conns)", workers), platSide.String(), "")
	r := platSide.median().rps() / pbSide.median().rps()
	e.report("variants", "cached variants/s platform ÷ PocketBase thumbs/s (median rounds)", fmt.Sprintf("%.2f %s (paired %s)", r, mark(r >= 2), pairedRatio(platSide, pbSide)), ">= 2")
	pbCPU, pbTotal := pbSide.perRequest(nil)
	platCPU, platTotal := platSide.perRequest([]string{"gateway", "files"})
	e.report("variants", "CPU/request, PocketBase cached thumb", pbCPU, "")
	e.report("variants", "CPU/request, platform cached variant", platCPU, "")
	e.report("variants", "CPU/request platform ÷ PocketBase (cached)", ratio(platTotal, pbTotal), "report")
	e.report("variants", "bench process CPU/request (load generator, NATS)", fmt.Sprintf("%.0f µs (PocketBase) vs %.0f µs (platform), not counted", pbSide.selfPerRequest(), platSide.selfPerRequest()), "")
	return nil
}
