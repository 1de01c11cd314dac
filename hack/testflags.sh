# Sourced by the scripts that run go test (hack/unit.sh, race.sh, fuzz.sh)
# and by make e2e. Test binaries are linked without their symbol table and DWARF
# (-ldflags=-s, which implies -w since Go 1.22): make test links about 95 of
# them, make race as many again and make fuzz one per target, and the debug
# information is a quarter of that work (all test binaries: 530 CPU-s linked as before, 384
# with -s, measured on 2 cores). Stack traces keep their files and lines
# (pclntab). An -ldflags in the caller's GOFLAGS or go test flags wins.
export GOFLAGS="-ldflags=-s${GOFLAGS:+ $GOFLAGS}"
