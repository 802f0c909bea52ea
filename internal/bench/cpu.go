package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// On a 2-core machine the email path's throughput is the CPU it spends per
// email, and that CPU is split between three processes: this one (API and
// worker), the Temporal server and PostgreSQL. cpuSplit reads what each used
// during a run from /proc, so a figure says where the time went, not only
// how much there was.

// clockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat; 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// cpuSample is the CPU time used so far by this process, the Temporal
// server and every PostgreSQL process.
type cpuSample struct {
	self, temporal, postgres time.Duration
}

// cpuSampler samples the processes of a benchmark.
type cpuSampler struct {
	temporalPid int
}

func (c cpuSampler) sample() cpuSample {
	return cpuSample{self: pidCPU(os.Getpid()), temporal: pidCPU(c.temporalPid), postgres: commandCPU("postgres")}
}

// A phase of a benchmark leaves work behind on the servers after its last
// run has closed (the real server deletes finished tasks in batches, for
// one), which would otherwise slow the next phase and count in its CPU.
// Before the next phase begins, waitQuiet waits until the Temporal server and
// PostgreSQL together use less than quietCPU in a quietWindow, for at most
// quietLimit.
const (
	quietWindow = 500 * time.Millisecond
	quietCPU    = 25 * time.Millisecond // 5 % of one core
	quietLimit  = 20 * time.Second
)

// waitQuiet waits until the servers are quiet and returns how long it
// waited.
func (c cpuSampler) waitQuiet(ctx context.Context) time.Duration {
	began := time.Now()
	last := c.sample()
	for time.Since(began) < quietLimit && ctx.Err() == nil {
		time.Sleep(quietWindow)
		now := c.sample()
		if used := now.sub(last); used.temporal+used.postgres < quietCPU {
			break
		}
		last = now
	}
	return time.Since(began)
}

func (c cpuSample) sub(o cpuSample) cpuSample {
	return cpuSample{self: c.self - o.self, temporal: c.temporal - o.temporal, postgres: c.postgres - o.postgres}
}

func (c cpuSample) add(o cpuSample) cpuSample {
	return cpuSample{self: c.self + o.self, temporal: c.temporal + o.temporal, postgres: c.postgres + o.postgres}
}

// per divides the times by a number of items.
func (c cpuSample) per(n int) cpuSample {
	d := time.Duration(n)
	return cpuSample{self: c.self / d, temporal: c.temporal / d, postgres: c.postgres / d}
}

func (c cpuSample) total() time.Duration { return c.self + c.temporal + c.postgres }

// pidCPU is the user and system time of a process and of its children that
// have exited (PostgreSQL's backends end when their connection closes).
func pidCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: the fields
	// after its closing parenthesis start with the state (field 3).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	fields := bytes.Fields(b[i+1:])
	var ticks int64
	for _, f := range []int{14, 15, 16, 17} { // utime stime cutime cstime
		if n, err := strconv.ParseInt(string(fields[f-3]), 10, 64); err == nil {
			ticks += n
		}
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// commandCPU is pidCPU summed over every process with the given command
// name.
func commandCPU(comm string) time.Duration {
	dirs, _ := os.ReadDir("/proc")
	var total time.Duration
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		name, err := os.ReadFile(filepath.Join("/proc", d.Name(), "comm"))
		if err == nil && string(bytes.TrimSpace(name)) == comm {
			total += pidCPU(pid)
		}
	}
	return total
}
