// Command a64prog is an arm64 program for coverage's tests: sites (in
// sites_arm64.s) holds one instruction of each kind the tests look at.
// It is built, never run.
package main

import (
	"fmt"
	"os"
)

func sites()

func main() {
	if len(os.Args) > 1000 {
		sites() // referenced, so linked; never called
	}
	fmt.Println("a64prog")
}
