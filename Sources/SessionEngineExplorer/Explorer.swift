import CSessionEngineExplorer

/// Runs every job of a program on one thread it controls.
package enum Explorer {}
