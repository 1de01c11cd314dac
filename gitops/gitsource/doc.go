// Package gitsource is how the source component reads git: ls-remote of a branch, tag or commit
// (Resolve), one shallow fetch of that commit into a cache shared by every caller of the same
// (repository, ref), its tree written to a read-only directory (Checkout), per-path tree hashes
// (Snapshot.TreeHashes) and cache housekeeping (Prune, a disk cap).
//
// Git data and git servers are untrusted input: every network operation has a timeout, a fetch
// a maximum size, a checkout a maximum size and file count, and a symbolic link in a tree is
// followed only inside the tree (its target is written as a copy, so nothing outside the
// checkout can be read through it). Credentials come from a Secret's data (ParseCredentials);
// SSH needs known_hosts. Errors are *Error values that name the repository (never a
// credential) and carry a Reason a status condition can use.
//
// A cached commit is never served without the caller's credentials having been checked by the
// server: every Checkout starts with a Resolve, whose answer is shared only between callers
// that present the same credentials (for ListTTL).
package gitsource
