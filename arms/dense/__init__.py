"""Dense arms: SFT targets and batched greedy generation."""
