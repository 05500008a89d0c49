//go:build amd64

package inferior

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"
)

func TestJumpTarget(t *testing.T) {
	for _, tc := range []struct {
		name string
		code []byte
		want uint64
		ok   bool
	}{
		{"jmp rel32 forward", []byte{0xe9, 0x10, 0, 0, 0}, 0x1000 + 5 + 0x10, true},
		{"jmp rel32 backward", []byte{0xe9, 0xfb, 0xff, 0xff, 0xff}, 0x1000, true},
		{"ds-padded jmp rel32", []byte{0x3e, 0x3e, 0xe9, 1, 0, 0, 0}, 0x1000 + 7 + 1, true},
		{"jmp rel8 backward", []byte{0xeb, 0xfe}, 0x1000, true},
		{"short rel32", []byte{0xe9, 1, 0}, 0, false},
		{"not a jump", []byte{0x55, 0x48, 0x89, 0xe5}, 0, false},
		{"operand-size prefix is not padding", []byte{0x66, 0xe9, 1, 0, 0, 0}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := jumpTarget(0x1000, tc.code)
			if ok != tc.ok || got != tc.want {
				t.Errorf("jumpTarget(% x) = %#x, %v; want %#x, %v", tc.code, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestQueueLiveMerges checks that a patch put in and taken out before a
// flush leaves nothing to write, and that a later change of queued
// bytes keeps the bytes memory holds as the old ones.
func TestQueueLiveMerges(t *testing.T) {
	p := &Process{}
	orig, jmp, other := []byte{1, 2, 3, 4, 5}, []byte{0xe9, 0, 0, 0, 0}, []byte{0xe9, 9, 9, 9, 9}
	p.queueLive(0x1000, orig, jmp)
	p.queueLive(0x1000, jmp, orig)
	if len(p.live.queue) != 0 {
		t.Fatalf("in and out again: %d patches queued, want 0", len(p.live.queue))
	}
	p.queueLive(0x1000, orig, jmp)
	p.queueLive(0x1000, jmp, other)
	if len(p.live.queue) != 1 || !bytes.Equal(p.live.queue[0].old, orig) || !bytes.Equal(p.live.queue[0].new, other) {
		t.Fatalf("queue after two changes: %+v", p.live.queue)
	}
	buf := make([]byte, 3)
	p.overlayLive(0x1003, buf)
	if !bytes.Equal(buf, []byte{9, 9, 0}) {
		t.Errorf("reads see % x, want 09 09 00", buf)
	}
}

// TestTakeReadyByKey: a wait's want map is looked up by key: relocateAll's
// values say whose SIGSTOP is on its way, false for a stop of another's,
// and such a thread's collected status must reach it all the same (it
// once waited out liveWaitLimit, 2 s, with the status in ready).
func TestTakeReadyByKey(t *testing.T) {
	p := &Process{}
	p.live.ready = []stashedStatus{{tid: 7, ws: 0x137f}, {tid: 9, ws: 0x57f}}
	for _, tc := range []struct {
		want map[int]bool
		tid  int
		ok   bool
	}{
		{map[int]bool{9: false}, 9, true},
		{map[int]bool{8: true}, 0, false},
		{map[int]bool{7: true, 8: false}, 7, true},
		{map[int]bool{7: true}, 0, false}, // taken already
	} {
		tid, _, ok := p.takeReady(tc.want)
		if tid != tc.tid || ok != tc.ok {
			t.Errorf("takeReady(%v) = %d, %v; want %d, %v", tc.want, tid, ok, tc.tid, tc.ok)
		}
	}
	if len(p.live.ready) != 0 {
		t.Errorf("left in ready: %v", p.live.ready)
	}
}

// TestTakeStashedStatus: a status kept in ready or the stash (a fork
// child's first stop, collected by a wait for any status) is taken out
// by its pid, once, in order, and nothing else is.
func TestTakeStashedStatus(t *testing.T) {
	p := &Process{}
	p.live.ready = []stashedStatus{{tid: 7, ws: 0x137f}, {tid: 9, ws: 0x57f}}
	p.live.stash = []stashedStatus{{tid: 9, ws: 0x117f}, {tid: 11, ws: 0x137f}}
	for _, tc := range []struct {
		pid int
		ws  unix.WaitStatus
		ok  bool
	}{
		{8, 0, false},
		{9, 0x117f, true}, // the stash's first: the older
		{9, 0x57f, true},
		{9, 0, false},
		{11, 0x137f, true},
	} {
		ws, ok := p.takeStashedStatus(tc.pid)
		if ws != tc.ws || ok != tc.ok {
			t.Errorf("takeStashedStatus(%d) = %#x, %v; want %#x, %v", tc.pid, ws, ok, tc.ws, tc.ok)
		}
	}
	if len(p.live.ready) != 1 || p.live.ready[0].tid != 7 || len(p.live.stash) != 0 {
		t.Errorf("left: ready %v, stash %v; want only 7's in ready", p.live.ready, p.live.stash)
	}
}
