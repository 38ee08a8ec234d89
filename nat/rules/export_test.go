package rules

// The unexported helpers the external tests check directly.
var (
	MergePorts    = mergePorts
	ComparePorts  = comparePorts
	MergePrefixes = mergePrefixes
	MergeRanges   = mergeRanges
	SubtractAddrs = subtractAddrs
	FamilyOf      = familyOf
)

const DigestHexChars = digestHexChars
