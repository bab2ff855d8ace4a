app_name = "reviews"
urlpatterns: list = []
