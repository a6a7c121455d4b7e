"""Training: objectives, the recurrence schedule, the recurrent training step, optimisers and their audits."""
