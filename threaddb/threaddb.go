// Package threaddb computes the addresses of thread-local variables in a
// glibc (NPTL) inferior the way glibc's libthread_db does for
// td_thr_tls_get_addr, without loading libthread_db: it answers gdb's
// qGetTLSAddr:<thread-id>,<offset>,<lm> packet.
//
// glibc publishes the layout of its private structures for debuggers as
// read-only GLIBC_PRIVATE objects in libc.so.6's dynamic symbol table
// (nptl_db/structs.def): each _thread_db_<type>_<field> is three 32-bit
// words {size in bits, element count, byte offset} (see Descriptor), and a
// few _thread_db_const_* / _thread_db_sizeof_* are single 32-bit values.
// NewResolver reads the ones it needs from the libc file with debug/elf;
// everything else is read from the inferior's memory.
//
// The walk, for a thread whose thread pointer is tp (on x86-64,
// _thread_db_const_thread_area is FS: tp is the thread's fs_base, which
// is also its struct pthread; TLS_TCB_AT_TP):
//
//	modid  = link_map.l_tls_modid at lm (lm 0: modid 1, the static-executable case gdbserver handles)
//	slot   = the dtv_slotinfo for modid, found by walking
//	         _rtld_global._dl_tls_dtv_slotinfo_list (len, next, slotinfo[])
//	         (_rtld_global is found through libc's __nptl_rtld_global pointer;
//	         a static executable has the list head _dl_tls_dtv_slotinfo_list)
//	map    = slot.map (must be non-zero), modgen = slot.gen
//	dtv    = pthread.dtvp at tp
//	dtvgen = dtv[0].counter
//	if dtvgen < modgen, or dtv[modid].pointer.val has its low bit set
//	(TLS_DTV_UNALLOCATED is -1): the thread has no block for the module in
//	its dtv; if map's l_tls_offset is a real static TLS offset (neither
//	NO_TLS_OFFSET 0 nor FORCED_DYNAMIC_TLS_OFFSET -1) the block is at
//	tp - l_tls_offset, otherwise ErrTLSNotAllocated (TD_TLSDEFER)
//	else the block is dtv[modid].pointer.val
//	address = block + offset
//
// This follows td_thr_tls_get_addr / td_thr_tlsbase of glibc 2.34 and
// later. If the slotinfo list cannot be reached (no __nptl_rtld_global),
// the generation check is skipped and the dtv length dtv[-1].counter bounds
// modid instead.
//
// Only the x86-64 thread-pointer convention (const_thread_area == FS) is
// supported; NewResolver reports ErrUnsupported for anything else.
package threaddb

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// Errors reported by the Resolver. They map onto libthread_db's td_err_e
// results; gdbserver answers every one of them with E01.
var (
	// ErrTLSNotAllocated: the thread has no TLS block for the module yet
	// (libthread_db's TD_TLSDEFER): dynamic TLS it has not touched.
	ErrTLSNotAllocated = errors.New("TLS block not allocated yet for this thread")
	// ErrNoTLS: the module has no TLS (module id 0; TD_NOTLS).
	ErrNoTLS = errors.New("module has no thread-local storage")
	// ErrUnsupported: this libc uses a thread-pointer convention or layout
	// the resolver does not handle.
	ErrUnsupported = errors.New("unsupported libthread_db layout")
)

// Memory reads inferior memory; a short count comes with an error.
type Memory interface {
	ReadMemory(addr uint64, buf []byte) (int, error)
}

// x86-64 <sys/reg.h> index of FS in struct user_regs_struct: the value
// _thread_db_const_thread_area has when the thread pointer is fs_base.
const amd64RegFS = 25

// Values of link_map.l_tls_offset that are not a static TLS offset on
// TLS_TCB_AT_TP targets (glibc's NO_TLS_OFFSET, FORCED_DYNAMIC_TLS_OFFSET).
const (
	noTLSOffset            = 0
	forcedDynamicTLSOffset = ^uint64(0) // -1
)

// Bounds for walks through inferior memory, so a corrupted list ends.
const maxSlotinfoListEntries = 1 << 16

// Resolver computes thread-local variable addresses in one inferior. It
// keeps no state between calls beyond the descriptors, so it is safe for
// concurrent use when its Memory is.
type Resolver struct {
	mem   Memory
	order binary.ByteOrder
	// descBelowTP is how far below the thread pointer the thread's
	// struct pthread is (0 on x86-64).
	descBelowTP uint64

	linkMapTLSModid  Descriptor
	linkMapTLSOffset Descriptor
	pthreadDTVP      Descriptor
	dtvDTV           Descriptor
	dtvPointerVal    Descriptor
	dtvCounter       Descriptor

	// Slotinfo walk; hasSlotinfo is false when libc lacks any of these.
	// The list head is _rtld_global._dl_tls_dtv_slotinfo_list, reached
	// through libc's __nptl_rtld_global (a shared libc), or the variable
	// _dl_tls_dtv_slotinfo_list itself (a static executable: slotinfoVar).
	hasSlotinfo          bool
	slotinfoVar          bool
	slotinfoRootAddr     uint64 // run-time address of __nptl_rtld_global, or of _dl_tls_dtv_slotinfo_list when slotinfoVar
	slotinfoRoot         Descriptor
	rtldSlotinfoList     Descriptor
	slotinfoListLen      Descriptor
	slotinfoListNext     Descriptor
	slotinfoListSlotinfo Descriptor
	slotinfoGen          Descriptor
	slotinfoMap          Descriptor
}

// NewResolver prepares a Resolver for an inferior whose libc.so.6 is the
// file at libcPath, mapped so that its mapping with file offset 0 starts at
// libcBase (what FindLibc returns). It reads glibc's _thread_db_*
// descriptors from the file's dynamic symbol table (or its .symtab: libcPath
// may be a statically linked executable, which carries them there).
// It fails with ErrUnsupported when the file has no usable descriptors.
func NewResolver(mem Memory, libcPath string, libcBase uint64) (*Resolver, error) {
	lib, err := openLibc(libcPath)
	if err != nil {
		return nil, err
	}
	defer lib.close()
	return newResolver(mem, lib, libcBase)
}

func newResolver(mem Memory, lib *libcFile, libcBase uint64) (*Resolver, error) {
	area, err := lib.scalar("_thread_db_const_thread_area")
	if err != nil {
		return nil, fmt.Errorf("%w: no const_thread_area (%v)", ErrUnsupported, err)
	}
	descBelowTP, err := threadDescriptorBelowTP(lib.machine, uint64(area))
	if err != nil {
		return nil, err
	}
	r := &Resolver{mem: mem, order: lib.order, descBelowTP: descBelowTP}
	required := []struct {
		name string
		dst  *Descriptor
	}{
		{"_thread_db_link_map_l_tls_modid", &r.linkMapTLSModid},
		{"_thread_db_link_map_l_tls_offset", &r.linkMapTLSOffset},
		{"_thread_db_pthread_dtvp", &r.pthreadDTVP},
		{"_thread_db_dtv_dtv", &r.dtvDTV},
		{"_thread_db_dtv_t_pointer_val", &r.dtvPointerVal},
		{"_thread_db_dtv_t_counter", &r.dtvCounter},
	}
	for _, d := range required {
		if *d.dst, err = lib.descriptor(d.name); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
		}
	}
	for _, d := range []Descriptor{r.linkMapTLSModid, r.linkMapTLSOffset, r.pthreadDTVP, r.dtvPointerVal, r.dtvCounter} {
		if d.SizeBits != 32 && d.SizeBits != 64 {
			return nil, fmt.Errorf("%w: field width %d bits", ErrUnsupported, d.SizeBits)
		}
	}

	bias := libcBase - lib.firstLoadVaddr
	optional := []struct {
		name string
		dst  *Descriptor
	}{
		{"_thread_db_dtv_slotinfo_list_len", &r.slotinfoListLen},
		{"_thread_db_dtv_slotinfo_list_next", &r.slotinfoListNext},
		{"_thread_db_dtv_slotinfo_list_slotinfo", &r.slotinfoListSlotinfo},
		{"_thread_db_dtv_slotinfo_gen", &r.slotinfoGen},
		{"_thread_db_dtv_slotinfo_map", &r.slotinfoMap},
	}
	r.hasSlotinfo = true
	for _, d := range optional {
		if *d.dst, err = lib.descriptor(d.name); err != nil {
			r.hasSlotinfo = false
		}
	}
	if r.hasSlotinfo {
		r.hasSlotinfo = r.findSlotinfoHead(lib, bias)
	}
	return r, nil
}

// findSlotinfoHead locates the head of the dtv slotinfo list: through
// __nptl_rtld_global and _rtld_global (shared libc), or the static
// executable's own _dl_tls_dtv_slotinfo_list. It reports whether it could.
func (r *Resolver) findSlotinfoHead(lib *libcFile, bias uint64) bool {
	var err1, err2, err3 error
	r.slotinfoRoot, err1 = lib.descriptor("_thread_db___nptl_rtld_global")
	r.rtldSlotinfoList, err2 = lib.descriptor("_thread_db_rtld_global__dl_tls_dtv_slotinfo_list")
	addr, err3 := lib.symbolAddress("__nptl_rtld_global")
	if err1 == nil && err2 == nil && err3 == nil {
		r.slotinfoRootAddr = bias + addr
		return true
	}
	r.slotinfoRoot, err1 = lib.descriptor("_thread_db__dl_tls_dtv_slotinfo_list")
	addr, err2 = lib.symbolAddress("_dl_tls_dtv_slotinfo_list")
	if err1 == nil && err2 == nil {
		r.slotinfoVar = true
		r.slotinfoRootAddr = bias + addr
		return true
	}
	return false
}

// threadDescriptorBelowTP says, from glibc's _thread_db_const_thread_area
// (DB_THREAD_SELF), how far below the thread pointer a thread's struct
// pthread is: on x86-64 the thread pointer is fs_base, the descriptor
// itself (REGISTER (64, 64, FS), the value 25); on aarch64
// (TLS_DTV_AT_TP) the descriptor lies just below the thread pointer,
// tpidr_el0, and the value is sizeof (struct pthread) (CONST_THREAD_AREA).
func threadDescriptorBelowTP(machine elf.Machine, area uint64) (uint64, error) {
	switch {
	case machine == machineX8664 && area == amd64RegFS:
		return 0, nil
	case machine == elf.EM_AARCH64 && area > 0 && area < 1<<16:
		return area, nil
	}
	return 0, fmt.Errorf("%w: thread pointer is register %d on machine %d, only fs_base on x86-64 and tpidr_el0 on aarch64 are handled", ErrUnsupported, area, machine)
}

// TLSAddress returns the address of the thread-local object at offset in
// the TLS block of the module whose struct link_map is at lm, for the
// thread whose thread pointer (fs_base, tpidr_el0) is fsBase — the answer to
// qGetTLSAddr:<thread>,<offset>,<lm>. lm 0 means module id 1 (a static
// executable), as gdbserver does.
func (r *Resolver) TLSAddress(fsBase, lm, offset uint64) (uint64, error) {
	modid := uint64(1)
	if lm != 0 {
		var err error
		modid, err = r.readField(lm, r.linkMapTLSModid, 0)
		if err != nil {
			return 0, fmt.Errorf("reading l_tls_modid of link_map %#x: %w", lm, err)
		}
	}
	base, err := r.TLSBase(fsBase, modid)
	if err != nil {
		return 0, err
	}
	return base + offset, nil
}

// TLSBase returns the start of module modid's TLS block for the thread
// whose fs_base is fsBase (libthread_db's td_thr_tlsbase).
func (r *Resolver) TLSBase(fsBase, modid uint64) (uint64, error) {
	if modid < 1 {
		return 0, ErrNoTLS
	}
	if fsBase == 0 {
		return 0, fmt.Errorf("thread pointer is 0: %w", ErrTLSNotAllocated)
	}
	tp := fsBase - r.descBelowTP // the thread's struct pthread
	dtv, err := r.readField(tp, r.pthreadDTVP, 0)
	if err != nil {
		return 0, fmt.Errorf("reading dtv pointer of thread %#x: %w", tp, err)
	}
	genAddr, err := r.dtvDTV.ElementAddress(dtv, 0)
	if err != nil {
		return 0, fmt.Errorf("dtv[0]: %w", err)
	}
	dtvGen, err := r.readField(genAddr, r.dtvCounter, 0)
	if err != nil {
		return 0, fmt.Errorf("reading dtv generation at %#x: %w", genAddr, err)
	}

	var linkMap uint64 // 0 when the slotinfo list is not available
	if r.hasSlotinfo {
		slot, err := r.slotinfo(modid)
		if err != nil {
			return 0, err
		}
		if linkMap, err = r.readField(slot, r.slotinfoMap, 0); err != nil {
			return 0, fmt.Errorf("reading slotinfo map of module %d: %w", modid, err)
		}
		if linkMap == 0 {
			return 0, fmt.Errorf("module %d has no link_map in the slotinfo list: %w", modid, ErrNoTLS)
		}
		modGen, err := r.readField(slot, r.slotinfoGen, 0)
		if err != nil {
			return 0, fmt.Errorf("reading slotinfo generation of module %d: %w", modid, err)
		}
		if dtvGen < modGen {
			return r.staticTLSBase(tp, linkMap, modid)
		}
	} else {
		// dtv[-1].counter is the number of module slots the dtv has.
		length, err := r.readField(genAddr-uint64(r.dtvDTV.SizeBits/8), r.dtvCounter, 0)
		if err != nil {
			return 0, fmt.Errorf("reading dtv length: %w", err)
		}
		if modid > length {
			return 0, fmt.Errorf("module %d beyond the thread's dtv (%d slots): %w", modid, length, ErrTLSNotAllocated)
		}
	}

	slotAddr, err := r.dtvDTV.ElementAddress(dtv, modid)
	if err != nil {
		return 0, fmt.Errorf("dtv[%d]: %w", modid, err)
	}
	block, err := r.readField(slotAddr, r.dtvPointerVal, 0)
	if err != nil {
		return 0, fmt.Errorf("reading dtv[%d] at %#x: %w", modid, slotAddr, err)
	}
	if block&1 != 0 { // TLS_DTV_UNALLOCATED
		if linkMap == 0 {
			return 0, fmt.Errorf("module %d: %w", modid, ErrTLSNotAllocated)
		}
		return r.staticTLSBase(tp, linkMap, modid)
	}
	return block, nil
}

// staticTLSBase finds the block of a module in static TLS (below the
// thread pointer on x86-64) when the thread's dtv does not know it yet.
func (r *Resolver) staticTLSBase(tp, linkMap, modid uint64) (uint64, error) {
	off, err := r.readField(linkMap, r.linkMapTLSOffset, 0)
	if err != nil {
		return 0, fmt.Errorf("reading l_tls_offset of link_map %#x: %w", linkMap, err)
	}
	if r.linkMapTLSOffset.SizeBits == 32 {
		off = uint64(int64(int32(uint32(off))))
	}
	if off == noTLSOffset || off == forcedDynamicTLSOffset {
		return 0, fmt.Errorf("module %d: %w", modid, ErrTLSNotAllocated)
	}
	return tp - off, nil
}

// slotinfo returns the address of the struct dtv_slotinfo of module modid.
func (r *Resolver) slotinfo(modid uint64) (uint64, error) {
	list, err := r.readField(r.slotinfoRootAddr, r.slotinfoRoot, 0)
	if err != nil {
		return 0, fmt.Errorf("reading slotinfo list root at %#x: %w", r.slotinfoRootAddr, err)
	}
	if !r.slotinfoVar { // list is _rtld_global's address
		if list, err = r.readField(list, r.rtldSlotinfoList, 0); err != nil {
			return 0, fmt.Errorf("reading _rtld_global._dl_tls_dtv_slotinfo_list: %w", err)
		}
	}
	first := uint64(0) // module id of the current list entry's slotinfo[0]
	for i := 0; list != 0; i++ {
		if i == maxSlotinfoListEntries {
			return 0, fmt.Errorf("slotinfo list longer than %d entries", maxSlotinfoListEntries)
		}
		n, err := r.readField(list, r.slotinfoListLen, 0)
		if err != nil {
			return 0, fmt.Errorf("reading slotinfo list entry %#x: %w", list, err)
		}
		if modid < first+n {
			addr, err := r.slotinfoListSlotinfo.ElementAddress(list, modid-first)
			if err != nil {
				return 0, fmt.Errorf("slotinfo of module %d: %w", modid, err)
			}
			return addr, nil
		}
		first += n
		if list, err = r.readField(list, r.slotinfoListNext, 0); err != nil {
			return 0, fmt.Errorf("reading slotinfo list link: %w", err)
		}
	}
	return 0, fmt.Errorf("module %d is not in the slotinfo list: %w", modid, ErrNoTLS)
}

// readField reads element index of the field d describes in the
// structure at base, as an unsigned integer of the field's width.
func (r *Resolver) readField(base uint64, d Descriptor, index uint64) (uint64, error) {
	addr, err := d.ElementAddress(base, index)
	if err != nil {
		return 0, err
	}
	var buf [8]byte
	size := int(d.SizeBits / 8)
	if size != 4 && size != 8 {
		return 0, fmt.Errorf("%w: %d-byte field", ErrUnsupported, size)
	}
	n, err := r.mem.ReadMemory(addr, buf[:size])
	if err != nil {
		return 0, fmt.Errorf("reading %d bytes at %#x: %w", size, addr, err)
	}
	if n != size {
		return 0, fmt.Errorf("short read at %#x: %d of %d bytes", addr, n, size)
	}
	if size == 4 {
		return uint64(r.order.Uint32(buf[:4])), nil
	}
	return r.order.Uint64(buf[:8]), nil
}
