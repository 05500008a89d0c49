package rsp

import (
	"bytes"
	"sort"
	"sync"
)

// Handler answers one packet; it returns the reply payload. A nil reply
// means the empty reply ("not supported").
type Handler func(payload []byte) []byte

// muxEntry is one registered prefix.
type muxEntry struct {
	prefix  []byte
	handler Handler
}

// Mux dispatches packets to handlers by prefix; the longest registered
// prefix that the packet starts with wins. It is safe for concurrent use.
type Mux struct {
	mu      sync.RWMutex
	entries []muxEntry // sorted by decreasing prefix length
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{} }

// Handle registers h for packets starting with prefix, replacing any handler
// already registered for the same prefix.
func (m *Mux) Handle(prefix string, h Handler) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.entries {
		if string(m.entries[i].prefix) == prefix {
			m.entries[i].handler = h
			return
		}
	}
	m.entries = append(m.entries, muxEntry{prefix: []byte(prefix), handler: h})
	sort.SliceStable(m.entries, func(i, j int) bool {
		return len(m.entries[i].prefix) > len(m.entries[j].prefix)
	})
}

// Dispatch runs the handler with the longest prefix of payload and returns
// its reply; found is false when no prefix matches.
func (m *Mux) Dispatch(payload []byte) (reply []byte, found bool) {
	m.mu.RLock()
	var h Handler
	for _, e := range m.entries {
		if bytes.HasPrefix(payload, e.prefix) {
			h = e.handler
			break
		}
	}
	m.mu.RUnlock()
	if h == nil {
		return nil, false
	}
	return h(payload), true
}
