package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU accounting of a benchmark run, a yardstick that the shared host's
// noise moves much less than throughput: CPU time this process (server,
// projection runner and HTTP clients) and the local PostgreSQL server used,
// and the share of the machine's time the hypervisor stole from it.

// clkTck is USER_HZ, the unit of /proc's CPU times (100 on every Linux
// platform Go supports).
const clkTck = 100

type cpuSample struct {
	self time.Duration // this process, user + system
	pg   time.Duration // every process named postgres, children included
	pgOK bool          // a local PostgreSQL server was found
	// db is the CPU time of each backend connected to the benchmark's
	// database, by pid: unlike pg, it leaves out whatever else the server
	// does meanwhile (other people's tests on a shared server), and the
	// server's own background work (WAL writer, autovacuum, checkpoints).
	db    map[string]time.Duration
	steal int64 // machine-wide jiffies: stolen
	idle  int64 // machine-wide jiffies: idle or waiting for I/O
	total int64 // machine-wide jiffies: all
}

// sampleCPU samples CPU times; database names the benchmark's database.
func sampleCPU(database string) cpuSample {
	s := cpuSample{db: map[string]time.Duration{}}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var pg int64
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ... utime(14) stime(15) cutime(16) cstime(17)
		open, close := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
		if open < 0 || close < open || string(b[open+1:close]) != "postgres" {
			continue
		}
		f := strings.Fields(string(b[close+1:]))
		if len(f) < 15 {
			continue
		}
		var own int64
		for _, i := range []int{11, 12, 13, 14} { // fields 14-17, counted after "state" (field 3)
			v, _ := strconv.ParseInt(f[i], 10, 64)
			pg += v
			if i <= 12 {
				own += v
			}
		}
		s.pgOK = true
		// A backend's title: "postgres: user database host(port) state".
		if title, err := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline")); err == nil &&
			strings.Contains(string(title), " "+database+" ") {
			s.db[filepath.Base(filepath.Dir(p))] = time.Duration(own) * time.Second / clkTck
		}
	}
	s.pg = time.Duration(pg) * time.Second / clkTck
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
		for i := 1; i < len(f) && i <= 8; i++ {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			s.total += v
			switch i {
			case 4, 5:
				s.idle += v
			case 8:
				s.steal = v
			}
		}
	}
	return s
}

// cpuReport is the CPU used between two samples, per op.
type cpuReport struct {
	selfPerOp, pgPerOp, dbPerOp time.Duration
	pgOK                        bool
	stealPct                    float64
}

func cpuSince(before cpuSample, database string, ops int) cpuReport {
	after := sampleCPU(database)
	r := cpuReport{pgOK: before.pgOK && after.pgOK}
	if ops > 0 {
		r.selfPerOp = (after.self - before.self) / time.Duration(ops)
		r.pgPerOp = (after.pg - before.pg) / time.Duration(ops)
		// A backend that exited meanwhile is missed (the pool keeps its
		// connections during a run); one that started counts in full.
		var db time.Duration
		for pid, t := range after.db {
			db += t - before.db[pid]
		}
		r.dbPerOp = db / time.Duration(ops)
	}
	if d := after.total - before.total; d > 0 {
		r.stealPct = 100 * float64(after.steal-before.steal) / float64(d)
	}
	return r
}
