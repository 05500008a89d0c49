//go:build !amd64

package trapfallback

import "gotpstub/inferior"

// registerStepper does nothing here: analyse decodes x86-64 only, so
// step-overs stay in place (every thread stopped for them).
func registerStepper(*inferior.Process, *Installer) {}
