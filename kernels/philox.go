package kernels

// Philox4x32 is the Philox4x32-10 counter-based generator of Random123 (Salmon et al., SC'11), the one cuRAND
// implements: 10 rounds, the key bumped by the Weyl constants between rounds.
func Philox4x32(ctr [4]uint32, key [2]uint32) [4]uint32 {
	const (
		m0 = 0xD2511F53
		m1 = 0xCD9E8D57
		w0 = 0x9E3779B9
		w1 = 0xBB67AE85
	)
	for r := 0; r < 10; r++ {
		if r > 0 {
			key[0] += w0
			key[1] += w1
		}
		p0 := uint64(m0) * uint64(ctr[0])
		p1 := uint64(m1) * uint64(ctr[2])
		ctr = [4]uint32{
			uint32(p1>>32) ^ ctr[1] ^ key[0], uint32(p1),
			uint32(p0>>32) ^ ctr[3] ^ key[1], uint32(p0),
		}
	}
	return ctr
}

// Uniform is the sampling noise's uniform for vocabulary index i of (seed, seq, pos) (docs/arithmetic.md §10):
// key (lo32 seed, hi32 seed), counter (i>>2, lo32 pos, lo32 seq, hi32 seq), word i&3, mapped to an odd multiple
// of 2^-24 in (0, 1).
func Uniform(seed uint64, seq, pos int64, i int) float32 {
	r := Philox4x32([4]uint32{uint32(i >> 2), uint32(pos), uint32(seq), uint32(uint64(seq) >> 32)},
		[2]uint32{uint32(seed), uint32(seed >> 32)})
	w := r[i&3]
	return float32(w>>9<<1|1) * 0x1p-24
}

// Gumbel is -Log(-Log(Uniform(seed, seq, pos, i))).
func Gumbel(seed uint64, seq, pos int64, i int) float32 {
	u := Uniform(seed, seq, pos, i)
	return -Log(-Log(u))
}
