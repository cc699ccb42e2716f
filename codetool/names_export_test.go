package codetool

// NPMGuest is npmGuest, for the external tests.
var NPMGuest = npmGuest
