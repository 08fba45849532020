package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100
// on every Linux architecture Go supports (the kernel's HZ may differ, but
// /proc reports in USER_HZ; `getconf CLK_TCK` prints it). Hardcoded to
// avoid cgo for sysconf.
const clockTicks = 100

// procStat is one line of /proc/PID/stat: the parent and the CPU time
// (utime+stime, in clock ticks) of the process, every thread included.
type procStat struct {
	ppid  int
	ticks int64
	comm  string
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// pid (comm) state ppid ... : comm may hold spaces and parentheses,
	// so the fields are counted from the last ')'.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, s)
	}
	f := strings.Fields(s[end+1:])
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
	if len(f) < 13 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ppid, _ := strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return procStat{ppid: ppid, ticks: ut + st, comm: s[open+1 : end]}, nil
}

// allStats reads every process's stat; processes that end meanwhile are
// left out.
func allStats() map[int]procStat {
	ents, _ := os.ReadDir("/proc")
	m := make(map[int]procStat, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil {
			m[pid] = st
		}
	}
	return m
}

// cpuSample is CPU ticks by process name, each with its descendants.
type cpuSample map[string]int64

// sampleChildren returns the CPU ticks of each child process of parent
// (its descendants' added to it), named by names[pid] or else by its comm;
// the processes in skip, and their descendants, are left out.
func sampleChildren(parent int, names map[int]string, skip map[int]bool) cpuSample {
	all := allStats()
	kids := map[int][]int{}
	for pid, st := range all {
		kids[st.ppid] = append(kids[st.ppid], pid)
	}
	var subtree func(pid int) int64
	subtree = func(pid int) int64 {
		t := all[pid].ticks
		for _, k := range kids[pid] {
			t += subtree(k)
		}
		return t
	}
	s := cpuSample{}
	for _, pid := range kids[parent] {
		if skip[pid] {
			continue
		}
		name := names[pid]
		if name == "" {
			// The comm (15 bytes of the program's name), without a
			// version: "ferretdb-v1.24." is ferretdb.
			name = all[pid].comm
			if i := strings.Index(name, "-v"); i > 0 {
				name = name[:i]
			}
		}
		s[name] += subtree(pid)
	}
	return s
}

// samplePid returns the CPU ticks of pid alone, under name.
func samplePid(pid int, name string) cpuSample {
	st, err := readStat(pid)
	if err != nil {
		return cpuSample{}
	}
	return cpuSample{name: st.ticks}
}

// add adds after-before to s.
func (s cpuSample) add(before, after cpuSample) {
	for k, v := range after {
		s[k] += v - before[k]
	}
}

// perRequest formats the µs of CPU per request of each process (in order,
// then any other process by name) and their sum; it returns the sum too.
func (s cpuSample) perRequest(requests int, order []string) (string, float64) {
	us := func(ticks int64) float64 { return float64(ticks) * 1e6 / clockTicks / float64(max(requests, 1)) }
	var names []string
	seen := map[string]bool{}
	for _, n := range order {
		if _, ok := s[n]; ok {
			names = append(names, n)
			seen[n] = true
		}
	}
	var rest []string
	for n := range s {
		if !seen[n] {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	names = append(names, rest...)
	var parts []string
	var total int64
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.0f", n, us(s[n])))
		total += s[n]
	}
	str := strings.Join(parts, " + ")
	if len(names) > 1 {
		str += fmt.Sprintf(" = %.0f", us(total))
	}
	return str + " µs", us(total)
}

// platformCPU returns a sampler of the CPU ticks of the platform's
// processes (the bench's children: services by name, servers by program),
// leaving out the processes in skip.
func platformCPU(e *env, skip ...int) func() cpuSample {
	names := map[int]string{}
	for name, procs := range e.p.Replicas {
		for i, p := range procs {
			label := name
			if len(procs) > 1 {
				label = fmt.Sprintf("%s-%d", name, i+1)
			}
			names[p.Pid()] = label
		}
	}
	skipped := map[int]bool{}
	for _, pid := range skip {
		skipped[pid] = true
	}
	return func() cpuSample { return sampleChildren(os.Getpid(), names, skipped) }
}
