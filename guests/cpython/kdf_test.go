package cpython_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKDFMatchesOpenSSL compiles the portable core of the guest's
// _fumehood_kdf module natively and checks its SHA-1/SHA-2 hashes,
// PBKDF2-HMAC and scrypt against the host Python's hashlib, which uses
// OpenSSL (kdf/kdf_check.py: 2,596 cases). It skips without clang-19 or a
// python3 whose hashlib has scrypt.
func TestKDFMatchesOpenSSL(t *testing.T) {
	clang, err := exec.LookPath("clang-19")
	if err != nil {
		t.Skip("clang-19 is not installed")
	}
	py, err := exec.LookPath("python3")
	if err != nil || exec.Command(py, "-c", "import hashlib; hashlib.scrypt").Run() != nil {
		t.Skip("no python3 with hashlib.scrypt (OpenSSL) to compare with")
	}
	lib := filepath.Join(t.TempDir(), "libkdf.so")
	out, err := exec.Command(clang, "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-o", lib, filepath.Join("kdf", "harness.c")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(py, filepath.Join("kdf", "kdf_check.py"), lib).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "ok 2596\n", string(out))
}
