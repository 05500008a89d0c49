package frames

import "encoding/binary"

func leU64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
func leU32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
