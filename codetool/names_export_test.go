package codetool

// BuiltGuest is builtGuest, for the external tests.
var BuiltGuest = builtGuest
