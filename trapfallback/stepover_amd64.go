package trapfallback

import "gotpstub/inferior"

// registerStepper makes in p's displaced stepper (analyse and the slots
// are x86-64's).
func registerStepper(p *inferior.Process, in *Installer) { p.SetDisplacedStepper(in.DisplacedStep) }
