"""TrainingPlan controller: plan status, ClusterQueue quota at block boundaries."""
