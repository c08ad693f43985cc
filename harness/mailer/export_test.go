package mailer

// LockHolders is how many requests hold or wait for key's lock: a test
// waits for it to reach 2 to know a second request is queued behind the
// first, without sleeping.
func LockHolders(s *Server, key string) int {
	return s.locks.Holders(key)
}
