package fasttp

// The program's code as ReadMemory shows it (the original bytes under
// breakpoints and code patches), kept a page at a time for one Batch.
// Inside a Batch the program is stopped and the installer's own jumps,
// int3s and trampolines' patches are shadowed, so that view cannot
// change; reading each tracepoint's bytes anew cost two
// process_vm_readv calls (about 2.5 µs each on the VMs measured), while
// a thousand function entries share a few pages. The installer's own
// WriteMemory calls (pads, trampolines and entry jumps, in memory it
// mapped) drop any page they touch. The jumps' code patches take their
// original bytes from there too (insertPatch), instead of a third read.

const codePage = 4096

// codeCache maps page addresses to their bytes. Nil outside a Batch:
// reads go to the process. Installer.codeMu guards it, a lock of its own
// that is never held while another is taken or the process is reached,
// so that readCode and writeMemory work with or without in.mu.
type codeCache map[uint64][]byte

// readCode reads the code at addr into buf like ReadMemory, from
// in.codePages inside a Batch.
func (in *Installer) readCode(addr uint64, buf []byte) (int, error) {
	in.codeMu.Lock()
	pages := in.codePages
	in.codeMu.Unlock()
	if pages == nil {
		return in.proc.ReadMemory(addr, buf)
	}
	n := 0
	for n < len(buf) {
		a := addr + uint64(n)
		page := a &^ (codePage - 1)
		b, ok := pages[page]
		if !ok {
			b = make([]byte, codePage)
			if m, _ := in.proc.ReadMemory(page, b); m != codePage {
				// Part of a page (a mapping's odd end, memory
				// the stub cannot read): ask the process, uncached.
				m, err := in.proc.ReadMemory(a, buf[n:])
				return n + m, err
			}
			in.codeMu.Lock()
			if in.codePages != nil {
				in.codePages[page] = b
			}
			in.codeMu.Unlock()
		}
		n += copy(buf[n:], b[a-page:])
	}
	return n, nil
}

// writeMemory writes data into the process and drops the cached pages
// it touches. in.mu may be held.
func (in *Installer) writeMemory(addr uint64, data []byte) error {
	in.forgetCode(addr, uint64(len(data)))
	return in.proc.WriteMemory(addr, data)
}

// forgetCode drops the cached pages holding any of [addr, addr+n).
func (in *Installer) forgetCode(addr, n uint64) {
	if n == 0 {
		return
	}
	in.codeMu.Lock()
	defer in.codeMu.Unlock()
	if in.codePages == nil {
		return
	}
	for page := addr &^ (codePage - 1); page < addr+n; page += codePage {
		delete(in.codePages, page)
	}
}

// insertPatch inserts a code patch (inferior.Process.InsertPatch); inside
// a Batch the original bytes come from the cached code.
func (in *Installer) insertPatch(addr uint64, code []byte) error {
	in.codeMu.Lock()
	batch := in.codePages != nil
	in.codeMu.Unlock()
	if !batch {
		return in.proc.InsertPatch(addr, code)
	}
	orig := make([]byte, len(code))
	if n, _ := in.readCode(addr, orig); n != len(orig) {
		return in.proc.InsertPatch(addr, code)
	}
	return in.proc.InsertPatchOver(addr, code, orig)
}
