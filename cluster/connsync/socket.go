package connsync

// datagramReader receives the local master daemon's datagrams. Read blocks
// until one arrives; Close makes a blocked Read return an error.
type datagramReader interface {
	Read(b []byte) (int, error)
	Close() error
}

// datagramWriter sends one datagram to the local backup daemon.
type datagramWriter interface {
	Write(b []byte) error
	Close() error
}

// openFunc opens both sockets in the calling thread's network namespace.
type openFunc func(cfg Config) (datagramReader, datagramWriter, error)
