// Command typecheck parses and type-checks packages and every package they
// import, from source, for the GOOS and GOARCH of its environment, and exits
// non-zero naming each error's file and line. It compiles nothing.
//
// `make cross` runs it with GOOS=windows: the distribution's non-Linux files
// (the receiver's stubs, main_windows.go) must build there. Compiling for
// another OS (`go build`, `go list -export`) compiles the whole dependency
// graph once more, the largest cost of `make test` on a fresh machine after
// the tool builds; type-checking from source finds the same errors in this
// module's code, which has no cgo and no assembly, for a fraction of it
// (docs/results/ci-runs.md, fifth stop). `make cross-link` still compiles
// and links the commands for darwin and windows.
//
// Usage: go build -o typecheck ./internal/tools/typecheck && GOOS=windows ./typecheck [-test] [-tags T] packages...
// (built for the machine it runs on; `go run` with GOOS set would build it
// for that OS).
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/tools/go/packages"
)

func main() {
	tests := flag.Bool("test", false, "type-check the packages' tests too")
	tags := flag.String("tags", "", "comma-separated build tags")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: typecheck [-test] [-tags T] packages...")
		os.Exit(2)
	}
	goos, goarch := os.Getenv("GOOS"), os.Getenv("GOARCH")
	if goos == "" {
		goos = runtime.GOOS
	}
	if goarch == "" {
		goarch = runtime.GOARCH
	}
	// NeedSyntax with NeedDeps: every package, dependencies too, from
	// source (go/packages asks `go list` for export data, which means
	// compiling, only without NeedDeps). No NeedTypesInfo: its maps are
	// not needed to find errors and would hold gigabytes for this graph.
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedCompiledGoFiles |
			packages.NeedImports | packages.NeedDeps | packages.NeedTypes | packages.NeedSyntax,
		Tests: *tests,
	}
	if *tags != "" {
		cfg.BuildFlags = []string{"-tags=" + *tags}
	}
	roots, err := packages.Load(cfg, flag.Args()...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "typecheck: GOOS=%s GOARCH=%s: %v\n", goos, goarch, err)
		os.Exit(1)
	}
	if n := packages.PrintErrors(roots); n > 0 {
		fmt.Fprintf(os.Stderr, "typecheck: GOOS=%s GOARCH=%s: %d errors\n", goos, goarch, n)
		os.Exit(1)
	}
	all := 0
	packages.Visit(roots, nil, func(*packages.Package) { all++ })
	fmt.Printf("typecheck: GOOS=%s GOARCH=%s: %d packages and their %d dependencies type-check\n",
		goos, goarch, len(roots), all-len(roots))
}
