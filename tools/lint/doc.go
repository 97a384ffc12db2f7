// Package lint pins staticcheck for `make check`. It is a module of its own
// so that its dependencies cannot change the versions the Consul build in
// tools/go.mod resolves.
package lint
