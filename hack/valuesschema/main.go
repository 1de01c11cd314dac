// Command valuesschema writes charts/fleet/values.schema.json (`make
// generate`); run it from the repository's root.
package main

import (
	"fmt"
	"os"

	"github.com/gitops-fleet/fleet/charts/valuesschema"
)

func main() {
	data, err := valuesschema.Generate()
	if err == nil {
		err = os.WriteFile(valuesschema.Path, data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "valuesschema:", err)
		os.Exit(1)
	}
}
