// Command pinned-binaries prints the module-built binaries of the pin file,
// one per line, tab-separated, for scripts/build-bundle.sh:
//
//	name  module  version  tools-dir  install-path  version-variable (or -)
//
//	pinned-binaries -pins images/components.yaml
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/harmonykaas/harmony/images/components"
)

func main() {
	pinsPath := flag.String("pins", "images/components.yaml", "the pin file")
	flag.Parse()
	pins, err := components.Load(*pinsPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinned-binaries:", err)
		os.Exit(1)
	}
	for _, b := range pins.Binaries {
		v := b.VersionVariable
		if v == "" {
			v = "-"
		}
		fmt.Printf("%s\t%s\t%s\t%s\t%s\t%s\n", b.Name, b.Module, b.Version, b.Tools, b.Path, v)
	}
}
