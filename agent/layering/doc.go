// Package layering has no code, only a test: TestLayers checks the import
// layers of the whole module (docs/architecture.md, "Packages and who may
// import whom"). It is a package of its own because it belongs to no one
// layer, and so that running it compiles nothing but itself.
package layering
