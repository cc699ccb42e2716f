// Package runtool is what fumehood's two run-Python tools share: the code
// tool a Go program gives a model (package codetool) and the MCP server's
// run_python and session_run (package mcpserver). It finds out what a
// guest offers code (Probe) and words it for a model (InstructionsFor and
// the texts below), turns a call's limits into a run's (CallLimits), a
// run's outcome into the text a model reads (FromRun, Result.Text), and
// finds the files a run made (WatchFiles). It is internal so that the
// public packages keep only what their users call.
package runtool
