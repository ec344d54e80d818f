import SessionEngineExplorer
import SessionEngineModel

print("schedules: 0 explored, 0 programs, 0 failures, seed 0")
