package sessionstore

import "time"

// SealLease returns a lease record as st stores it: owner holds the
// conversation until expires, tagged under st's key if it has one.
func SealLease(st Store, name, owner string, expires time.Time) []byte {
	return st.(*store).sealLease(name, leaseRecord{Owner: owner, Expires: expires.UnixNano()})
}
