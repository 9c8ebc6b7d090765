"""Evaluating what agents decided: team members' annotations of replies and tool calls."""
