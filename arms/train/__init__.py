"""Training: objectives, the recurrence schedule, the recurrent training step and optimisers."""
